package reprise

import (
	"sync"
	"sync/atomic"
)

// activity tells the Observer when the engine turns busy and when idle
// (Observer.EngineBusy, EngineIdle). It counts the work in flight: the
// engine's goroutines at work (the dispatcher, a replayer, an attempt
// being started or recorded, a look for runs...) and the wake-ups sent to
// them and not yet taken, which the goroutine that takes one inherits. An
// attempt inside step code is not work in flight (its step may wait for
// the clock: its timeout); inStep counts those. An attempt the engine
// cancels counts again at once, as it is expected back.
//
// An engine without an Observer has no activity (nil), and each of the
// methods below is then one nil check at its call site: no atomics on the
// engine's hot paths, no calls.
type activity struct {
	obs    Observer
	n      atomic.Int64 // work in flight
	inStep atomic.Int64 // attempts inside step code
	// mu orders the changes of n between zero and more, and their
	// reports: the reports come in the order of the changes, and each
	// EngineIdle says how many attempts were in step code then.
	mu sync.Mutex
}

func newActivity(obs Observer) *activity {
	if obs == nil {
		return nil
	}
	return &activity{obs: obs}
}

// add counts d more units of work in flight (fewer when d is negative).
func (a *activity) add(d int64) {
	if a != nil {
		a.change(d)
	}
}

// change adds d to the work in flight, reporting the engine busy when the
// count leaves zero and idle when it reaches it. A change that keeps it
// above zero takes no lock.
func (a *activity) change(d int64) {
	for {
		n := a.n.Load()
		if n <= 0 || n+d <= 0 {
			break
		}
		if a.n.CompareAndSwap(n, n+d) {
			return
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch n := a.n.Add(d); {
	case n > 0 && n-d <= 0:
		a.obs.EngineBusy()
	case n <= 0 && n-d > 0:
		a.obs.EngineIdle(int(a.inStep.Load()))
	}
}

// enterStep moves a running attempt from the work in flight to the
// attempts inside step code.
func (a *activity) enterStep() {
	if a != nil {
		a.inStep.Add(1)
		a.change(-1)
	}
}

// leaveStep moves attempt at, whose step returned, back to the work in
// flight, unless it was counted there when the engine cancelled it.
func (a *activity) leaveStep(at *attempt) {
	if a != nil {
		a.stop(at)
		a.inStep.Add(-1)
	}
}

// stopping counts attempt at as work in flight once its step returns or
// the engine cancels it, whichever comes first: a cancelled step is
// expected back soon.
func (a *activity) stopping(at *attempt) {
	if a != nil {
		a.stop(at)
	}
}

// stop and drop are stopping and dropped past their nil checks, which
// inline at their call sites.
func (a *activity) stop(at *attempt) {
	if at.stopping.CompareAndSwap(false, true) {
		a.change(1)
	}
}

// dropped takes back the count of an attempt cancelled while it waited
// for a slot, which will not run to take it back.
func (a *activity) dropped(at *attempt) {
	if a != nil {
		a.drop(at)
	}
}

func (a *activity) drop(at *attempt) {
	if !at.stopping.CompareAndSwap(false, true) {
		a.change(-1)
	}
}
