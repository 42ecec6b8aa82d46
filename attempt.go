package reprise

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"reprise/clock"
	"reprise/retry"
	"reprise/store"
)

// attempt is a step attempt leased to this engine.
type attempt struct {
	task *store.Task
	// cancel cancels the context the attempt runs under, made as it runs
	// (see run); a cancel that comes before is kept in cancelled and
	// cause. Guarded by mu.
	mu        sync.Mutex
	cancel    context.CancelCauseFunc
	cancelled bool
	cause     error
	// stopping is set by whichever comes first: the step returning, or
	// the engine cancelling it. A cancelled step is expected back soon, so
	// it counts as busy until it returns (see activity).
	stopping atomic.Bool
	// inSlot says that the attempt holds one of the engine's slots;
	// stopBeat stops the heartbeat of an attempt waiting for one. Both
	// are guarded by Engine.mu.
	inSlot   bool
	stopBeat func()
}

// stop cancels the attempt with cause.
func (a *attempt) stop(e *Engine, cause error) {
	e.act.stopping(a)
	a.end(cause)
}

// end cancels the attempt's context with cause, or, if it has not run yet,
// the context it will run under.
func (a *attempt) end(cause error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.cancel != nil:
		a.cancel(cause)
	case !a.cancelled:
		a.cancelled, a.cause = true, cause
	}
}

// run makes the context the attempt runs under, from the engine's work
// scope ctx: cancelled at once if the attempt was while it waited.
func (a *attempt) run(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(ctx)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cancel = cancel
	if a.cancelled {
		cancel(a.cause)
	}
	return ctx
}

// newAttemptLocked registers an attempt of t; e.mu must be held.
func (e *Engine) newAttemptLocked(t *store.Task) *attempt {
	a := &attempt{task: t}
	e.attempts[t.ID] = a
	e.startedLocked(t.RunID)
	e.watch(t.LeaseUntil) // for the reaper
	return a
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
	var full []string // reserved steps at their limit
	for _, name := range reserved {
		if e.stepFullLocked(name) {
			full = append(full, name)
		}
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
	// A step reserved for and not leased (cancelled, or the write failed)
	// has its room back; the dispatcher, which does not look for the ready
	// tasks of a step at its limit, must be told.
	if slices.ContainsFunc(full, func(name string) bool { return !e.stepFullLocked(name) }) && e.roomLocked() > 0 {
		e.kick()
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
	e.act.add(1)
	e.goroutines.Go(func() {
		defer e.workWG.Done()
		var memo inputMemo // the step's input, across retries at once
		for a != nil {
			a = e.nextAttempt(a, e.runAttempt(a, s, &memo))
		}
		e.act.add(-1)
	})
}

// nextAttempt ends attempt a and returns the attempt that follows it at
// once, holding a slot, or nil. A next attempt that finds no slot free
// waits for one (see leaveSlotLocked).
func (e *Engine) nextAttempt(a *attempt, next *store.Task) *attempt {
	a.end(nil)
	e.mu.Lock()
	resumed := e.leaveSlotLocked(a)
	held := e.heldRoomLocked() <= 0
	delete(e.attempts, a.task.ID)
	e.roomFreedLocked()
	if e.evictShort.Load() {
		e.evictSoon() // the run may wait for something else now
	}
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

// runAttempt calls the step under its timeout, keeps its lease alive and
// records the outcome.
func (e *Engine) runAttempt(a *attempt, s *stepEntry, memo *inputMemo) (next *store.Task) {
	ctx, t := a.run(e.workCtx), a.task
	if context.Cause(ctx) != nil {
		// Cancelled while it waited for a slot: what stopped it counted
		// it busy, as if it were in step code.
		e.act.dropped(a)
		return nil
	}
	pol, err := e.decodePolicy(t.Policy)
	if err != nil {
		e.leaveSlot(a)
		return e.finishAttempt(t, nil, retry.Permanent(err), pol)
	}
	start := e.clock.Now()
	var ai AttemptInfo
	if e.cfg.Observer != nil || e.cfg.Tracer != nil {
		ai = e.attemptInfo(t)
	}
	if e.cfg.Observer != nil {
		ai.Started = start
		e.cfg.Observer.AttemptStarted(ai)
	}
	info := &StepInfo{RunID: t.RunID, Step: t.Step, Position: t.Position, Attempt: t.Attempt, IdempotencyKey: t.IdempotencyKey,
		StepVersion: t.StepVersion}
	if e.cfg.Tracer != nil {
		ctx, info.TraceParent = e.cfg.Tracer.AttemptContext(ctx, ai)
	}
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
		e.act.enterStep()
		out, err = callStep(ctx, s, t.Input, memo)
		e.act.leaveStep(a)
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
				AttemptInfo: ai,
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
func attemptLimit(pol *compiledPolicy, t *store.Task, now time.Time) (time.Duration, error) {
	limit, cause := t.Timeout, ErrTimeout
	if pol != nil && pol.Deadline > 0 {
		left := max(pol.Deadline-now.Sub(firstStart(t)), time.Millisecond)
		if limit == 0 || left < limit {
			limit, cause = left, ErrDeadline
		}
	}
	return limit, cause
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

// finishAttempt records the attempt's outcome and tells the run. A
// failure retried at once has its next attempt started in the same
// transaction; finishAttempt returns it.
func (e *Engine) finishAttempt(t *store.Task, out json.RawMessage, err error, pol *compiledPolicy) (next *store.Task) {
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
		p = e.decide(t, err, pol, false)
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
					e.retryAt(ev.RetryAt)
				}
			}
		}
		return o.Next
	}
	return nil
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
	t       clock.Timer
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
