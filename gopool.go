package reprise

import "time"

// A gopool runs functions on goroutines that it keeps, idle, for a while
// after each one, so that a function usually starts on a stack that the
// ones before it have grown. A fresh goroutine's stack is small; growing it
// (copying it, more than once) to decode a step's JSON input took longer
// than the decoding, a tenth of the engine's own CPU per one-step run.
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
