package reprise

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reprise/store"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"reprise/retry"
)

// attempt is a step attempt leased to this engine.
type attempt struct {
	task   *store.Task
	ctx    context.Context
	cancel context.CancelCauseFunc
	// stopping is set by whichever comes first: the step returning, or
	// the engine cancelling it. A cancelled step is expected back soon, so
	// it counts as busy until it returns (see Activity).
	stopping atomic.Bool
	// inSlot says that the attempt holds one of the engine's slots;
	// stopBeat stops the heartbeat of an attempt waiting for one. Both
	// are guarded by Engine.mu.
	inSlot   bool
	stopBeat func()
}

// Slots and leases. MaxConcurrentSteps bounds the attempts in step code,
// each holding a slot. An attempt leaves its slot when its step returns,
// so that another step runs while its outcome is written. A retry at once
// is leased in that same write (TaskFail's LeaseNext; see canLeaseNext),
// and takes a slot when the write returns, ahead of any claim; if none is
// free by then, it waits for one with its lease kept alive. Attempts
// claimed or leased as scheduled that find the slots taken meanwhile wait
// the same way. The leases held at once, in step code, being written or
// waiting, are bounded by heldPerSlot times the slots, so that a slow
// store does not make the engine claim its whole backlog.
const heldPerSlot = 4

// stop cancels the attempt with cause.
func (a *attempt) stop(e *Engine, cause error) {
	if a.stopping.CompareAndSwap(false, true) {
		e.busy.Add(1)
	}
	a.cancel(cause)
}

// kick wakes the dispatcher: tasks or timers may be due. A kick not yet
// taken counts as busy; the dispatcher inherits the count.
func (e *Engine) kick() {
	e.busy.Add(1)
	select {
	case e.kickc <- struct{}{}:
	default:
		e.busy.Add(-1)
	}
}

// dispatch is the engine's one scheduling loop. It claims ready tasks of
// the steps this engine runs while it has room, fires due timers and fails
// attempts whose lease lapsed, then sleeps until the store's next due time
// or a kick. No fixed polling interval: a backoff ends when its timer fires.
func (e *Engine) dispatch(ctx context.Context) {
	t := e.clock.NewTimer(time.Hour)
	defer t.Stop()
	var wake store.Wake
	kicked := true
	for {
		e.busy.Add(1)
		now := e.clock.Now()
		if kicked {
			// Something may be due that the last read did not show: read
			// before writes that would hold the write lock for nothing.
			wake = e.nextWake(ctx, now)
		}
		claimed, acted := false, false
		if due(wake.Timer, now) {
			e.fireTimers(ctx)
			acted = true
		}
		if due(wake.Lease, now) {
			e.reap(ctx)
			acted = true
		}
		if due(wake.Task, now) {
			claimed = e.claimTasks(ctx)
			acted = true
		}
		if acted || !kicked {
			wake = e.nextWake(ctx, now)
		}
		kicked = false
		next := earliest(wake.Timer, wake.Lease)
		if e.hasRoom() {
			next = earliest(next, wake.Task)
		}
		if claimed || (!next.IsZero() && !next.After(e.clock.Now())) {
			e.busy.Add(-1)
			if ctx.Err() != nil {
				return
			}
			continue
		}
		if next.IsZero() {
			next = e.clock.Now().Add(e.cfg.PollInterval)
		}
		if !t.Stop() {
			select {
			case <-t.C():
			default:
			}
		}
		resetAt(t, next, e.clock)
		e.wakeAt.Store(next.UnixNano())
		e.busy.Add(-1)
		select {
		case <-ctx.Done():
			return
		case <-e.kickc:
			kicked = true
			e.busy.Add(-1) // the kick's count; the loop adds its own
		case <-t.C():
		}
		e.wakeAt.Store(0)
	}
}

// nextWake asks the store when something next becomes due; on an error,
// it says to look again after the poll interval.
func (e *Engine) nextWake(ctx context.Context, now time.Time) store.Wake {
	wake, err := e.store.NextWake(ctx, &store.NextWakeParams{Steps: e.localSteps()})
	if err != nil && ctx.Err() == nil {
		e.log.Warn("next wake", "err", err)
		return store.Wake{Task: now.Add(e.cfg.PollInterval)}
	}
	return wake
}

func due(at, now time.Time) bool { return !at.IsZero() && !at.After(now) }

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// LocalSteps returns the names of the steps this engine runs itself.
func (e *Engine) LocalSteps() []string { return e.localSteps() }

func (e *Engine) localSteps() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	names := make([]string, 0, len(e.steps))
	for name := range e.steps {
		names = append(names, name)
	}
	return names
}

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
	return c - e.perStep[s.name] - e.reservedBy[s.name] - e.waitingForLocked(s.name)
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
	full := e.roomLocked() <= 0
	if s := e.steps[a.task.Step]; s != nil && e.stepRoomLocked(s) == 0 {
		full = true
	}
	a.inSlot = false
	e.inSlots--
	e.perStep[a.task.Step]--
	resumed := e.slotsForWaitingLocked()
	e.roomFreedLocked()
	// The dispatcher claims while it has room anyway: only a full engine,
	// or step, needs telling.
	if full && len(resumed) == 0 {
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
// startAttempts (or unreserve). It returns the names it reserved.
func (e *Engine) reserve(steps []store.StepSpec) []string {
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

// cancelAttempt cancels the local attempt of a step that lost a select.
func (e *Engine) cancelAttempt(runID string, execution, position int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, a := range e.attempts {
		if t := a.task; t.RunID == runID && t.Execution == execution && t.Position == position {
			a.stop(e, ErrStepCancelled)
		}
	}
}

// claimTasks claims as many ready tasks as there is room for and starts
// their attempts. It reports whether it filled its quota, so that the
// caller looks again at once.
func (e *Engine) claimTasks(ctx context.Context) bool {
	e.mu.Lock()
	free := e.roomLocked()
	var quotas []store.StepQuota
	if free > 0 {
		for name, s := range e.steps {
			q := free
			if n := e.stepRoomLocked(s); n >= 0 {
				q = min(q, n)
			}
			if q > 0 {
				quotas = append(quotas, store.StepQuota{Name: name, Limit: q})
			}
		}
	}
	e.mu.Unlock()
	if len(quotas) == 0 {
		return false
	}
	tasks, err := e.store.TaskClaim(ctx, &store.TaskClaimParams{Owner: e.id, Steps: quotas, Limit: free, LeaseTTL: e.cfg.LeaseTTL})
	e.startAttempts(tasks, nil)
	if err != nil {
		if ctx.Err() == nil {
			e.log.Warn("claim tasks", "err", err)
		}
		return false
	}
	want := 0
	for _, q := range quotas {
		want += q.Limit
	}
	return len(tasks) > 0 && len(tasks) >= min(want, free)
}

// startAttempts runs attempts leased to this engine (claimed, or leased as
// their steps were scheduled with the room reserved for names), each on a
// goroutine of its own, or, if slots were taken while they were leased,
// once they free up. A failure retried at once starts the next attempt in
// the same transaction that records it (TaskFail's LeaseNext), and the
// same goroutine runs it.
func (e *Engine) startAttempts(ts []*store.Task, reserved []string) {
	if len(ts) == 0 && len(reserved) == 0 {
		return
	}
	type start struct {
		a *attempt
		s *stepEntry
	}
	var starts []start
	e.mu.Lock()
	for _, name := range reserved {
		e.reserved--
		e.reservedBy[name]--
	}
	for _, t := range ts {
		a := e.newAttemptLocked(t)
		if len(e.waiting) > 0 || !e.fitsLocked(t.Step) {
			a.stopBeat = e.heartbeat(a)
			e.waiting = append(e.waiting, a)
			continue
		}
		e.takeSlotLocked(a)
		starts = append(starts, start{a, e.steps[t.Step]})
	}
	resumed := e.slotsForWaitingLocked()
	if len(reserved) > 0 {
		e.roomFreedLocked()
	}
	e.mu.Unlock()
	for _, st := range starts {
		e.runChain(st.a, st.s)
	}
	e.resume(resumed)
}

// resume runs the retries that waited for the slots they now hold.
func (e *Engine) resume(as []*attempt) {
	for _, a := range as {
		a.stopBeat()
		e.mu.Lock()
		s := e.steps[a.task.Step]
		e.mu.Unlock()
		e.runChain(a, s)
	}
}

// runChain runs a, which holds a slot, and the attempts that follow it at
// once, on a goroutine.
func (e *Engine) runChain(a *attempt, s *stepEntry) {
	e.workWG.Add(1)
	e.act.Add(1)
	e.busy.Add(1)
	e.goroutines.Go(func() {
		defer e.workWG.Done()
		defer e.busy.Add(-1)
		var memo inputMemo // the step's input, across retries at once
		for a != nil {
			a = e.nextAttempt(a, e.runAttempt(a, s, &memo))
		}
	})
}

// newAttemptLocked registers an attempt of t; e.mu must be held.
func (e *Engine) newAttemptLocked(t *store.Task) *attempt {
	ctx, cancel := context.WithCancelCause(e.workCtx)
	a := &attempt{task: t, ctx: ctx, cancel: cancel}
	e.attempts[t.ID] = a
	e.watch(t.LeaseUntil) // for the reaper
	return a
}

// watch makes sure the dispatcher looks at the store by a time something
// written becomes due (a lease lapses, a retry is ready): it kicks the
// dispatcher unless it sleeps until no later than that. A dispatcher that
// is awake may have read the store before the write, so it is kicked too.
func (e *Engine) watch(due time.Time) {
	if at := e.wakeAt.Load(); at == 0 || due.UnixNano() < at {
		e.kick()
	}
}

// nextAttempt ends attempt a and returns the attempt that follows it at
// once, holding a slot, or nil. A next attempt that finds no slot free
// waits for one (see leaveSlotLocked).
func (e *Engine) nextAttempt(a *attempt, next *store.Task) *attempt {
	a.cancel(nil)
	e.act.Add(1)
	e.mu.Lock()
	resumed := e.leaveSlotLocked(a)
	held := e.heldRoomLocked() <= 0
	delete(e.attempts, a.task.ID)
	e.roomFreedLocked()
	var n *attempt
	if next != nil && e.running {
		n = e.newAttemptLocked(next)
		if len(e.waiting) == 0 && e.fitsLocked(next.Step) {
			e.takeSlotLocked(n)
		} else {
			n.stopBeat = e.heartbeat(n)
			e.waiting = append(e.waiting, n)
			n = nil
		}
	} else if held {
		e.kick() // a lease less held makes room for a claim
	}
	e.mu.Unlock()
	e.resume(resumed)
	return n
}

// canLeaseNext says whether the next attempt of t's step may be leased
// with t's failure. It then waits for a slot if none is free when the
// write returns, its lease kept alive, and keeps its place ahead of the
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
		w.cancel(ErrShutdown)
		// One stopped while it waited was counted busy, as if in step
		// code (attempt.stop); it will not run to take that back.
		if !w.stopping.CompareAndSwap(false, true) {
			e.busy.Add(-1)
		}
	}
}

// runAttempt calls the step under its timeout, keeps its lease alive and
// records the outcome.
func (e *Engine) runAttempt(a *attempt, s *stepEntry, memo *inputMemo) (next *store.Task) {
	ctx, t := a.ctx, a.task
	if context.Cause(ctx) != nil {
		// Cancelled while it waited for a slot: what stopped it counted
		// it busy, as if it were in step code.
		if !a.stopping.CompareAndSwap(false, true) {
			e.busy.Add(-1)
		}
		return nil
	}
	pol, err := e.decodePolicy(t.Policy)
	if err != nil {
		e.leaveSlot(a)
		return e.finishAttempt(t, nil, retry.Permanent(err), pol)
	}
	start := e.clock.Now()
	if e.cfg.Observer != nil {
		e.cfg.Observer.AttemptStarted(AttemptInfo{RunID: t.RunID, Step: t.Step, Attempt: t.Attempt, Worker: t.Owner})
	}
	info := &StepInfo{RunID: t.RunID, Step: t.Step, Position: t.Position, Attempt: t.Attempt, IdempotencyKey: t.IdempotencyKey,
		StepVersion: t.StepVersion}
	if limit, cause := attemptLimit(pol, t, start); limit > 0 {
		info.Deadline = start.Add(limit)
		timer := e.clock.AfterFunc(limit, func() { a.stop(e, cause) })
		defer timer.Stop()
	}
	if t.LeaseUntil.Before(info.Deadline) || info.Deadline.IsZero() {
		stop := e.heartbeat(a)
		defer stop()
	}
	ctx = context.WithValue(ctx, stepInfoKey{}, info)

	var out json.RawMessage
	if s == nil {
		err = retry.Permanent(fmt.Errorf("step %s is not registered in this engine", t.Step))
	} else {
		e.inStep.Add(1)
		e.busy.Add(-1)
		out, err = callStep(ctx, s, t.Input, memo)
		if a.stopping.CompareAndSwap(false, true) {
			e.busy.Add(1)
		}
		e.inStep.Add(-1)
	}
	e.leaveSlot(a)
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, ErrTimeout):
		err = retry.NewError(TypeTimeout, fmt.Sprintf("attempt %d exceeded its %v timeout", t.Attempt, t.Timeout))
		out = nil
	case errors.Is(cause, ErrDeadline):
		err = retry.NewError(TypeDeadlineExceeded, fmt.Sprintf("attempt %d was cut at its step's %v deadline", t.Attempt, pol.Deadline))
		out = nil
	case errors.Is(cause, ErrShutdown), errors.Is(cause, ErrCancelled), errors.Is(cause, ErrLeaseLost), errors.Is(cause, ErrStepCancelled):
		// The lease lapses (shutdown) or is already gone: nothing to record.
		e.log.Debug("attempt abandoned", "run_id", t.RunID, "step", t.Step, "attempt", t.Attempt, "cause", cause)
		if e.cfg.Observer != nil && (errors.Is(cause, ErrCancelled) || errors.Is(cause, ErrStepCancelled)) {
			e.cfg.Observer.AttemptEnded(AttemptEnd{
				AttemptInfo: AttemptInfo{RunID: t.RunID, Step: t.Step, Attempt: t.Attempt, Worker: t.Owner},
				Outcome:     OutcomeCancelled, Duration: e.clock.Now().Sub(start),
			})
		}
		return nil
	}
	return e.finishAttempt(t, out, err, pol)
}

// attemptLimit is how long an attempt may run, and the cause it is cut
// with then: the policy's timeout (ErrTimeout), or what is left of the
// step's deadline if that comes first (ErrDeadline).
func attemptLimit(pol *policy, t *store.Task, now time.Time) (time.Duration, error) {
	limit, cause := t.Timeout, ErrTimeout
	if pol != nil && pol.Deadline > 0 {
		left := max(pol.Deadline-now.Sub(firstStart(t)), time.Millisecond)
		if limit == 0 || left < limit {
			limit, cause = left, ErrDeadline
		}
	}
	return limit, cause
}

// firstStart is when the step's first attempt started.
func firstStart(t *store.Task) time.Time {
	if t.FirstStartedAt.IsZero() {
		return t.StartedAt
	}
	return t.FirstStartedAt
}

// callStep runs the step function, turning a panic into an attempt failure.
func callStep(ctx context.Context, s *stepEntry, input json.RawMessage, memo *inputMemo) (out json.RawMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &retry.Error{Type: TypePanic, Message: fmt.Sprintf("%v\n%s", p, debug.Stack()), Retryable: true}
		}
	}()
	return s.run(ctx, input, memo)
}

// heartbeat renews the attempt's lease every LeaseTTL/3 until stopped; a
// lost lease cancels the attempt with cause ErrLeaseLost. It runs on clock
// callbacks, so an attempt shorter than that costs no goroutine.
func (e *Engine) heartbeat(a *attempt) (stop func()) {
	b := &beat{e: e, a: a, every: max(e.cfg.LeaseTTL/3, time.Millisecond)}
	b.mu.Lock()
	b.t = e.clock.AfterFunc(b.every, b.renew)
	b.mu.Unlock()
	return b.stop
}

// A beat is an attempt's heartbeat: a struct rather than closures, which
// cost an allocation for each variable they share, on every attempt.
type beat struct {
	e     *Engine
	a     *attempt
	every time.Duration

	mu      sync.Mutex
	stopped bool
	t       Timer
}

func (b *beat) renew() {
	e, a := b.e, b.a
	_, err := e.store.TaskHeartbeat(e.storeCtx, &store.TaskHeartbeatParams{TaskID: a.task.ID, Token: a.task.Token, LeaseTTL: e.cfg.LeaseTTL})
	if errors.Is(err, ErrLeaseLost) {
		a.stop(e, ErrLeaseLost)
		return
	}
	if err != nil {
		e.log.Warn("heartbeat", "run_id", a.task.RunID, "step", a.task.Step, "err", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.stopped {
		b.t = e.clock.AfterFunc(b.every, b.renew)
	}
}

func (b *beat) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopped = true
	b.t.Stop()
}

// finishAttempt records the attempt's outcome and tells the run. A
// failure retried at once has its next attempt started in the same
// transaction; finishAttempt returns it.
func (e *Engine) finishAttempt(t *store.Task, out json.RawMessage, err error, pol *policy) (next *store.Task) {
	var o *store.Outcome
	var serr error
	var p *store.TaskFailParams
	if err == nil {
		if len(out) == 0 {
			out = json.RawMessage("null")
		}
		if e.handOff(t, out) {
			e.observeOK(t)
			return nil // the run records it with its next advance
		}
		o, serr = e.store.TaskComplete(e.storeCtx, &store.TaskCompleteParams{TaskID: t.ID, Token: t.Token, Output: out, Attempt: t.Attempt})
	} else {
		p = e.failParams(t, err, pol, false)
		if p.Retry && p.Delay == 0 && e.canLeaseNext(t) {
			p.LeaseNext, p.LeaseOwner, p.LeaseTTL = true, e.id, e.cfg.LeaseTTL
		}
		o, serr = e.store.TaskFail(e.storeCtx, p)
	}
	switch {
	case errors.Is(serr, ErrLeaseLost):
		e.log.Debug("late result rejected", "run_id", t.RunID, "step", t.Step, "attempt", t.Attempt)
		e.observeStale(t)
	case serr != nil:
		e.log.Warn("record attempt", "run_id", t.RunID, "step", t.Step, "attempt", t.Attempt, "err", serr)
	default:
		if e.cfg.Observer != nil {
			if p == nil {
				e.observeOK(t)
			} else {
				e.observeFail(t, err, p)
			}
		}
		e.deliver(o)
		if o.Next == nil {
			for _, ev := range o.Events {
				if ev.Type == store.EventAttemptFailed && !ev.RetryAt.IsZero() {
					e.watch(ev.RetryAt) // the retry, ready then
				}
			}
		}
		return o.Next
	}
	return nil
}

// failParams applies the policy to a failed attempt.
func (e *Engine) failParams(t *store.Task, err error, pol *policy, expired bool) *store.TaskFailParams {
	p := &store.TaskFailParams{TaskID: t.ID, Token: t.Token, Attempt: t.Attempt, Error: *errorInfo(err), Expired: expired}
	if pol == nil {
		p.Reason = string(retry.ReasonPermanent)
		return p
	}
	var cfg stepConfig
	e.mu.Lock()
	if s := e.steps[t.Step]; s != nil {
		cfg = s.cfg
	}
	e.mu.Unlock()
	if cfg.retryIf != nil && !retry.IsPermanent(err) && !cfg.retryIf(err) {
		p.Reason, p.Rule = string(retry.ReasonPermanent), RuleRetryIf
		return p
	}
	elapsed := e.clock.Now().Sub(firstStart(t))
	d := pol.Decide(&retry.Failure{
		Attempt:    t.Attempt - t.Base,
		Types:      retry.TypeChain(err),
		Permanent:  retry.IsPermanent(err),
		RetryAfter: retry.RetryAfterOf(err),
		Elapsed:    elapsed,
		Key:        t.IdempotencyKey,
	})
	p.Retry, p.Delay, p.Reason = d.Retry, d.Delay, string(d.Reason)
	if d.Rule >= 0 {
		p.Rule = pol.rules[d.Rule]
	}
	if d.Retry && cfg.nextDelay != nil {
		if nd, ok := cfg.nextDelay(t.Attempt, err); ok {
			p.Delay, p.Rule = max(nd, 0), p.Rule+" "+RuleNextDelay
			if pol.Deadline > 0 && elapsed+p.Delay > pol.Deadline {
				d.Reason, p.Retry, p.Reason = retry.ReasonDeadline, false, string(retry.ReasonDeadline)
			}
		}
	}
	if p.Retry && pol.Deadline > 0 && elapsed >= pol.Deadline {
		// No retry can start before a deadline that has passed, not even
		// one at once.
		d.Reason, p.Retry, p.Reason = retry.ReasonDeadline, false, string(retry.ReasonDeadline)
	}
	if d.Reason == retry.ReasonDeadline && p.Error.Type != TypeDeadlineExceeded {
		p.Error.Message = fmt.Sprintf("%s (next retry in %v would pass the %v deadline)", p.Error.Message, p.Delay, pol.Deadline)
	}
	return p
}

// A policy is a task's retry policy as decoded once per encoding, with
// the text of each of its rules, as AttemptFailed records the rule that
// decided.
type policy struct {
	*retry.Policy
	rules []string
}

// decodePolicy reads a task's policy, caching by its encoding.
func (e *Engine) decodePolicy(b json.RawMessage) (*policy, error) {
	if p, ok := e.decoded.Load(string(b)); ok {
		return p.(*policy), nil
	}
	p := &policy{Policy: new(retry.Policy)}
	if len(b) > 0 {
		if err := json.Unmarshal(b, p.Policy); err != nil {
			return nil, fmt.Errorf("decode policy: %w", err)
		}
	}
	p.rules = make([]string, len(p.Rules))
	for k := range p.Rules {
		p.rules[k] = (&retry.Policy{Rules: p.Rules[k : k+1]}).String()
	}
	e.decoded.Store(string(b), p)
	return p, nil
}

// fireTimers fires due timers and tells their runs.
func (e *Engine) fireTimers(ctx context.Context) {
	for {
		const batch = 500
		outs, err := e.store.TimerFire(ctx, &store.TimerFireParams{Limit: batch})
		if err != nil {
			if ctx.Err() == nil {
				e.log.Warn("fire timers", "err", err)
			}
			return
		}
		for _, o := range outs {
			e.deliver(o)
		}
		e.act.Add(int64(len(outs)))
		if len(outs) < batch {
			return
		}
	}
}

// reap fails attempts whose lease lapsed without a result, as their
// policies decide: over their timeout (Timeout), or their worker gone
// (WorkerLost; see lapseError).
func (e *Engine) reap(ctx context.Context) {
	tasks, err := e.store.TaskListExpired(ctx, &store.TaskListExpiredParams{Limit: 500})
	if err != nil {
		if ctx.Err() == nil {
			e.log.Warn("list expired leases", "err", err)
		}
		return
	}
	for _, t := range tasks {
		pol, _ := e.decodePolicy(t.Policy)
		p := e.failParams(t, e.lapseError(t), pol, true)
		if n := t.Lapses + 1; e.cfg.PoisonAfter > 0 && n >= e.cfg.PoisonAfter {
			p.Error = ErrorInfo{Type: TypePoison, Message: fmt.Sprintf(
				"the lease of attempt %d lapsed without a result, %d times in a row: its workers keep dying", t.Attempt, n)}
			p.Retry, p.Delay, p.Reason = false, 0, string(retry.ReasonPermanent)
			p.Rule = fmt.Sprintf("poison after %d lapses", e.cfg.PoisonAfter)
		}
		o, err := e.store.TaskFail(ctx, p)
		if err != nil {
			if !errors.Is(err, ErrLeaseLost) && ctx.Err() == nil {
				e.log.Warn("fail expired attempt", "run_id", t.RunID, "err", err)
			}
			continue
		}
		if e.cfg.Observer != nil {
			e.cfg.Observer.LeaseLapsed(AttemptInfo{RunID: t.RunID, Step: t.Step, Attempt: t.Attempt, Worker: t.Owner})
			e.observeFail(t, retry.NewError(p.Error.Type, p.Error.Message), p)
		}
		e.act.Add(1)
		e.deliver(o)
	}
}

// lapseError is the error of an attempt whose lease lapsed without a
// result. A lease runs to the attempt's timeout at most, renewed by its
// worker's heartbeats: one that lapsed before the timeout, or that a gone
// engine held, lost its worker (WorkerLost: a crash, a kill, a pull worker
// that stopped heartbeating); one that ran to the timeout with its worker
// live timed out (Timeout).
func (e *Engine) lapseError(t *store.Task) error {
	if t.Timeout > 0 && !t.LeaseUntil.Before(t.StartedAt.Add(t.Timeout)) && !e.lostWorker(t) {
		return retry.NewError(TypeTimeout, fmt.Sprintf("attempt %d exceeded its %v timeout", t.Attempt, t.Timeout))
	}
	who := "its worker"
	if t.Owner != "" {
		who = "its worker " + t.Owner
	}
	return retry.NewError(TypeWorkerLost, fmt.Sprintf(
		"attempt %d lost %s: its lease lapsed without a result (the worker crashed, was killed or stopped heartbeating)", t.Attempt, who))
}
