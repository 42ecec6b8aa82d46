package reprise

import "time"

// A gopool runs functions on goroutines that it keeps, idle, for a while
// after each one, so that a function usually starts on a stack that the
// ones before it have grown. A fresh goroutine's stack is small; growing it
// (copying it, more than once) to decode a step's JSON input took longer
// than the decoding.
//
// The collector halves the stack of a goroutine that uses less than a
// quarter of it, which an idle one would: each cycle shrank the idle
// goroutines' stacks and the next functions grew them again. So a
// goroutine of the pool holds a frame of a quarter of keptStack, and the
// collector leaves a stack of up to keptStack alone.
type gopool struct {
	work chan func()
	idle time.Duration // how long a goroutine waits for work before it ends
}

func newGopool(idle time.Duration) *gopool {
	return &gopool{work: make(chan func()), idle: idle}
}

// Go runs f on an idle goroutine of the pool, or on a new one.
func (p *gopool) Go(f func()) {
	select {
	case p.work <- f:
	default:
		go p.worker(f)
	}
}

func (p *gopool) worker(f func()) {
	var inUse [keptStack / 4]byte
	hold(inUse[:])
	t := time.NewTimer(p.idle)
	defer t.Stop()
	for {
		f()
		f = nil // for the collector, while this goroutine waits
		t.Reset(p.idle)
		select {
		case f = <-p.work:
		case <-t.C:
			return
		}
	}
}

// keptStack is the stack a pool's goroutine keeps while idle: enough for
// the bench workload's steps to decode their input without growing it.
const keptStack = 16 << 10

// hold keeps b, and so the frame that holds it, on the stack: the compiler
// would drop an array nothing reads.
//
//go:noinline
func hold(b []byte) {}
