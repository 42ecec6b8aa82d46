package reprise

import (
	"runtime"
	"sync"
	"testing"
)

// alternation checks that EngineBusy and EngineIdle alternate, starting
// with EngineBusy, and are never called at once.
type alternation struct {
	NopObserver
	t      *testing.T
	mu     sync.Mutex
	inside bool // a call is running
	busy   bool
	calls  int
}

func (o *alternation) enter(busy bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.inside {
		o.t.Error("EngineBusy or EngineIdle called while another call runs")
	}
	if busy == o.busy {
		o.t.Errorf("call %d: busy %v twice in a row", o.calls+1, busy)
	}
	o.inside, o.busy = true, busy
	o.calls++
}

func (o *alternation) leave() {
	o.mu.Lock()
	o.inside = false
	o.mu.Unlock()
}

// The calls yield, to let other goroutines run into them.
func (o *alternation) EngineBusy() {
	o.enter(true)
	runtime.Gosched()
	o.leave()
}

func (o *alternation) EngineIdle(int) {
	o.enter(false)
	runtime.Gosched()
	o.leave()
}

// TestActivityReportsInOrder: goroutines that start and end work at once,
// crossing zero again and again, have the engine reported busy and idle in
// turn, one call at a time, and idle at the end. (Calls made as the count
// changed, without the lock, overlapped here.)
func TestActivityReportsInOrder(t *testing.T) {
	t.Parallel()
	o := &alternation{t: t}
	a := newActivity(o)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 5000 {
				a.add(1)
				a.add(-1)
			}
		})
	}
	wg.Wait()
	if n := a.n.Load(); n != 0 || o.busy {
		t.Fatalf("count %d, reported busy %v; want 0 and idle", n, o.busy)
	}
	if o.calls == 0 {
		t.Fatal("never reported busy")
	}
}

// TestActivityCountsStepsApart: an attempt inside step code is not work
// in flight; EngineIdle says how many there are; one the engine cancels
// counts again at once, and only once when its step then returns.
func TestActivityCountsStepsApart(t *testing.T) {
	t.Parallel()
	var idle []int
	o := &idleSteps{idle: &idle}
	a := newActivity(o)
	at := &attempt{}
	a.add(1) // the attempt, started
	a.enterStep()
	a.stopping(at) // cancelled: back at once
	a.leaveStep(at)
	a.add(-1) // its outcome recorded
	if n := a.n.Load(); n != 0 {
		t.Fatalf("count %d after the attempt, want 0", n)
	}
	if want := []int{1, 0}; len(idle) != 2 || idle[0] != want[0] || idle[1] != want[1] {
		t.Fatalf("EngineIdle(%v), want %v", idle, want)
	}

	var none *activity // an engine without an Observer
	none.add(1)
	none.enterStep()
	none.stopping(at)
	none.leaveStep(at)
	none.dropped(at)
}

type idleSteps struct {
	NopObserver
	idle *[]int
}

func (o *idleSteps) EngineIdle(steps int) { *o.idle = append(*o.idle, steps) }

// BenchmarkActivity: what the engine pays for each count of its work in
// flight (twice per attempt, per wake-up, per pass of the dispatcher):
// without an Observer a nil check; with one, an atomic compare-and-swap,
// and a lock and a call when the count crosses zero (not here).
func BenchmarkActivity(b *testing.B) {
	for _, bc := range []struct {
		name string
		obs  Observer
	}{
		{"observer=none", nil},
		{"observer=nop", NopObserver{}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			a := newActivity(bc.obs)
			a.add(1)
			for b.Loop() {
				a.add(1)
				a.add(-1)
			}
		})
	}
}
