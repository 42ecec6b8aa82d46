package reprise

import (
	"slices"

	"reprise/store"
)

// Slots and leases. MaxConcurrentSteps bounds the attempts in step code,
// each holding a slot. An attempt leaves its slot when its step returns,
// so that another step runs while its outcome is written. A retry at once
// is leased in that same write (TaskFail's LeaseNext; see canLeaseNext),
// and takes a slot when the write returns, before any claim; if none is
// free by then, it waits for one with its lease kept alive. Attempts
// claimed or leased as scheduled that find the slots taken meanwhile wait
// the same way. The leases held at once, in step code, being written or
// waiting, are bounded by heldPerSlot times the slots, so that a slow
// store does not make the engine claim its whole backlog.
const heldPerSlot = 4

func (e *Engine) hasRoom() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.roomLocked() > 0
}

// roomLocked is how many more attempts the engine may lease now: free
// slots not promised to a reservation or a waiting retry, within the bound
// on leases held. e.mu must be held.
func (e *Engine) roomLocked() int {
	return min(e.cfg.MaxConcurrentSteps-e.inSlots-e.reserved-len(e.waiting), e.heldRoomLocked())
}

// heldRoomLocked is how many more leases the engine may hold now. e.mu
// must be held.
func (e *Engine) heldRoomLocked() int {
	return heldPerSlot*e.cfg.MaxConcurrentSteps - len(e.attempts) - e.reserved
}

// stepRoomLocked is how many more attempts of step s may be leased now
// under its own concurrency limit, or -1 for no limit. e.mu must be held.
func (e *Engine) stepRoomLocked(s *stepEntry) int {
	c := s.cfg.concurrency
	if c <= 0 {
		return -1
	}
	return max(0, c-e.perStep[s.name]-e.reservedBy[s.name]-e.waitingForLocked(s.name))
}

// stepFullLocked says whether step name is at its own concurrency limit.
// e.mu must be held.
func (e *Engine) stepFullLocked(name string) bool {
	s := e.steps[name]
	return s != nil && e.stepRoomLocked(s) == 0
}

// stepsWithRoom returns the names of the steps this engine runs that are
// not at their own concurrency limit: those whose ready tasks a claim
// would take. It is never nil (nil would ask NextWake for every step).
func (e *Engine) stepsWithRoom() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	names := make([]string, 0, len(e.steps))
	for name, s := range e.steps {
		if e.stepRoomLocked(s) != 0 {
			names = append(names, name)
		}
	}
	return names
}

// waitingForLocked counts the attempts of step name waiting for a slot.
// e.mu must be held.
func (e *Engine) waitingForLocked(name string) int {
	n := 0
	for _, w := range e.waiting {
		if w.task.Step == name {
			n++
		}
	}
	return n
}

// fitsLocked says whether an attempt of step name may take a slot now,
// not counting the waiting retries. e.mu must be held.
func (e *Engine) fitsLocked(name string) bool {
	if e.inSlots+e.reserved >= e.cfg.MaxConcurrentSteps {
		return false
	}
	s := e.steps[name]
	return s == nil || s.cfg.concurrency <= 0 || e.perStep[name]+e.reservedBy[name] < s.cfg.concurrency
}

// takeSlotLocked gives a a slot. e.mu must be held.
func (e *Engine) takeSlotLocked(a *attempt) {
	a.inSlot = true
	e.inSlots++
	e.perStep[a.task.Step]++
}

// leaveSlot frees a's slot, if it holds one, for the oldest waiting retry
// that fits, or else for a claim.
func (e *Engine) leaveSlot(a *attempt) {
	e.mu.Lock()
	resumed := e.leaveSlotLocked(a)
	e.mu.Unlock()
	e.resume(resumed)
}

// leaveSlotLocked frees a's slot and returns the waiting retries that
// take it; the caller resumes them once e.mu is released.
func (e *Engine) leaveSlotLocked(a *attempt) []*attempt {
	if !a.inSlot {
		return nil
	}
	full := e.roomLocked() <= 0 || e.stepFullLocked(a.task.Step)
	a.inSlot = false
	e.inSlots--
	e.perStep[a.task.Step]--
	resumed := e.slotsForWaitingLocked()
	e.roomFreedLocked()
	// The dispatcher claims while it has room anyway, for the steps that
	// have room (see nextWake): only a full engine, or step, needs
	// telling, once the waiting retries have taken their slots.
	if full && e.roomLocked() > 0 && !e.stepFullLocked(a.task.Step) {
		e.kick()
	}
	return resumed
}

// slotsForWaitingLocked gives the free slots to the waiting retries that
// fit, oldest first, and returns them to be resumed. e.mu must be held.
func (e *Engine) slotsForWaitingLocked() []*attempt {
	var resumed []*attempt
	e.waiting = slices.DeleteFunc(e.waiting, func(w *attempt) bool {
		if !e.fitsLocked(w.task.Step) {
			return false
		}
		e.takeSlotLocked(w)
		resumed = append(resumed, w)
		return true
	})
	return resumed
}

// reserve marks the steps that this engine runs and has room for to be
// leased to it as they are scheduled, and holds their room until
// startAttempts (or unreserve). It returns the names it reserved. While
// work is due in the queue (dueWaiting), it reserves nothing: new steps
// queue behind what came due before them, and the dispatcher claims in
// the order they became ready.
func (e *Engine) reserve(steps []store.StepSpec) []string {
	if e.dueWaiting() {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var names []string
	if !e.running {
		return nil
	}
	for i := range steps {
		s := e.steps[steps[i].Name]
		if s == nil || e.roomLocked() <= 0 || e.stepRoomLocked(s) == 0 {
			continue
		}
		steps[i].Lease = true
		e.reserved++
		e.reservedBy[s.name]++
		names = append(names, s.name)
	}
	return names
}

func (e *Engine) unreserve(names []string) { e.startAttempts(nil, names) }

// canLeaseNext says whether the next attempt of t's step may be leased
// with t's failure. It then waits for a slot if none is free when the
// write returns, its lease kept alive, and keeps its place before the
// queue. An attempt with a timeout would spend that wait against its
// timeout, so it is leased so only while the slots are not all taken.
func (e *Engine) canLeaseNext(t *store.Task) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case !e.running:
		return false
	case t.Timeout == 0:
		return true
	case e.inSlots+len(e.waiting) >= e.cfg.MaxConcurrentSteps:
		return false
	}
	if s := e.steps[t.Step]; s != nil && s.cfg.concurrency > 0 {
		return e.perStep[t.Step]+e.waitingForLocked(t.Step) < s.cfg.concurrency
	}
	return true
}

// dropWaiting lets go of the retries waiting for a slot, when the engine
// stops: their leases lapse, as those of attempts cut off do.
func (e *Engine) dropWaiting() {
	e.mu.Lock()
	waiting := e.waiting
	e.waiting = nil
	for _, w := range waiting {
		delete(e.attempts, w.task.ID)
	}
	e.mu.Unlock()
	for _, w := range waiting {
		w.stopBeat()
		w.end(ErrShutdown)
		// One stopped while it waited was counted busy, as if in step
		// code (attempt.stop); it will not run to take that back.
		e.act.dropped(w)
	}
}

// runRoomLocked is how many more runs the engine may claim now: the room
// for attempts, less what the runs claimed may take until they release
// their claim (see releaseClaim). While its slots are taken, an engine
// claims no runs whose steps would only wait in its queue. e.mu must be
// held.
func (e *Engine) runRoomLocked() int { return e.roomLocked() - e.claiming }

// roomFreedLocked wakes the run claims when there is room for a batch and
// runs may be waiting. e.mu must be held.
func (e *Engine) roomFreedLocked() {
	if e.moreRuns && e.runRoomLocked() >= e.claimBatch() {
		e.claimSoon()
	}
}

// claimBatch is the room worth a claim of its own.
func (e *Engine) claimBatch() int { return max(1, e.cfg.MaxConcurrentSteps/4) }

// releaseClaim stops counting a claimed run's room as its claim's, once
// the run reserved room for its steps (reserve), made its first wait, or
// ended: from then on that room is counted as its steps' (reserved, then
// in slots), lest it count twice while its first advance is written.
func (e *Engine) releaseClaim(r *replayer) {
	if !r.claimed.CompareAndSwap(true, false) {
		return // every wait but a claimed run's first: no lock
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.claiming--
	e.roomFreedLocked()
}
