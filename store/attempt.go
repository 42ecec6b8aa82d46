package store

import (
	"errors"
	"time"
)

// AttemptLease returns how long the lease of an attempt runs: ttl, cut to
// the step's timeout when it has one, so that no lease outlives its
// attempt.
func AttemptLease(ttl, timeout time.Duration) time.Duration {
	if timeout > 0 && timeout < ttl {
		return timeout
	}
	return ttl
}

// Start starts t's next attempt, leased to owner at now for ttl
// (AttemptLease), as TaskClaim does: Attempt and Token go up by one,
// StartedAt is now, and FirstStartedAt too for the step's first attempt,
// and ReadyAt too when the caller did not read it.
func (t *Task) Start(owner string, ttl time.Duration, now Now) {
	t.Attempt++
	t.Token++
	t.Owner = owner
	t.StartedAt = now.At
	if t.ReadyAt.IsZero() {
		t.ReadyAt = now.At
	}
	if t.FirstStartedAt.IsZero() {
		t.FirstStartedAt = now.At
	}
	t.LeaseUntil = now.Add(AttemptLease(ttl, t.Timeout))
}

// AttemptStarted returns the event of the start of t's attempt (Start):
// AttemptStarted{Attempt, Worker: Owner, LeaseUntil, IdempotencyKey}.
func (t *Task) AttemptStarted() Event {
	e := t.event(EventAttemptStarted)
	e.Worker, e.LeaseUntil, e.IdempotencyKey = t.Owner, t.LeaseUntil, t.IdempotencyKey
	return e
}

// event returns an event of type typ about t's attempt: its execution,
// position, step and attempt number.
func (t *Task) event(typ EventType) Event {
	return Event{Type: typ, Execution: t.Execution, Position: t.Position, Step: t.Step, Attempt: t.Attempt}
}

// Total returns how many tasks a claim takes at most: the sum of the
// quotas (those of zero or less claim none), cut to Limit when it is set.
func (p *TaskClaimParams) Total() int {
	total := 0
	for _, q := range p.Steps {
		total += max(q.Limit, 0)
	}
	if p.Limit > 0 {
		total = min(total, p.Limit)
	}
	return total
}

// Completed returns the event TaskComplete appends for the attempt of t
// (its Execution, Position, Step and Attempt), as RunAdvance does for each
// of its Completed: StepCompleted{Output}.
func (p *TaskCompleteParams) Completed(t *Task) Event {
	e := t.event(EventStepCompleted)
	e.Output = p.Output
	return e
}

// Check reports what is wrong with p before any write: a next attempt to
// lease (LeaseNext) needs LeaseOwner and LeaseTTL.
func (p *TaskFailParams) Check() error {
	if p.LeaseNext && (p.LeaseOwner == "" || p.LeaseTTL <= 0) {
		return errors.New("leasing the next attempt needs a lease owner and a lease TTL")
	}
	return nil
}

// LeasesNext reports whether TaskFail starts the next attempt at once,
// leased to LeaseOwner: LeaseNext, for a retry without delay.
func (p *TaskFailParams) LeasesNext() bool {
	return p.LeaseNext && p.Retry && p.Delay == 0
}

// Ended reports whether a write that names attempt (TaskCompleteParams.
// Attempt) comes after that attempt ended: the task's current attempt is
// a later one, started in place under the same token (Next). Such a write
// changes nothing: ErrLeaseLost. A write that names no attempt (zero) is
// about the current one.
func Ended(attempt, current int) bool {
	return attempt != 0 && attempt < current
}

// Next returns the attempt that a retry at once (LeasesNext) starts after
// t's, leased to LeaseOwner as TaskClaim would lease it (Task.Start), with
// its lapses counted (Lapses). An attempt without a timeout keeps the
// lease of the one before when that is the same owner's with half its
// LeaseTTL or more to run, as a heartbeat would not yet have renewed it.
// If no lapses need a reset either, it starts in place (inPlace): it keeps
// the token too, since the lease's holder, whose attempt has just ended,
// is the only one who could write with it. A store may then leave the
// task's row as it was and read the attempt from the history; that is why
// every write about an attempt names it (TaskCompleteParams.Attempt).
func (p *TaskFailParams) Next(t *Task, now Now) (next Task, inPlace bool) {
	next = *t
	next.ReadyAt = now.At // due as it fails
	kept := t.Timeout == 0 && t.Owner == p.LeaseOwner && t.LeaseUntil.Sub(now.At) >= p.LeaseTTL/2
	inPlace = kept && !p.Expired && t.Lapses == 0
	next.Start(p.LeaseOwner, p.LeaseTTL, now)
	if inPlace {
		next.Token = t.Token
	}
	if kept {
		next.LeaseUntil = t.LeaseUntil
	}
	next.Lapses = p.Lapses(t.Lapses)
	return next, inPlace
}

// Failed appends to dst the events TaskFail appends for the failed attempt
// of t (its Execution, Position, Step and Attempt) at now, and returns the
// result: AttemptFailed{Error, Rule}, with Delay and RetryAt (when the task
// is ready again) for a retry, or with Reason and followed by
// StepFailed{Error, Reason} for a step that fails for good. The attempt a
// retry starts at once (LeasesNext) follows them: Task.Start, then
// Task.AttemptStarted.
func (p *TaskFailParams) Failed(dst []Event, t *Task, now Now) []Event {
	errInfo := new(ErrorInfo) // the events' own, shared
	*errInfo = p.Error
	failed := t.event(EventAttemptFailed)
	failed.Error, failed.Rule = errInfo, p.Rule
	if p.Retry {
		failed.Delay, failed.RetryAt = p.Delay, now.Add(p.Delay)
		return append(dst, failed)
	}
	failed.Reason = p.Reason
	stepFailed := t.event(EventStepFailed)
	stepFailed.Error, stepFailed.Reason = errInfo, p.Reason
	return append(dst, failed, stepFailed)
}

// Lapses returns the count of leases in a row that lapsed (Task.Lapses)
// after this failure of a task that had lapses: one more for a lease that
// lapsed (Expired), none after any other result.
func (p *TaskFailParams) Lapses(lapses int) int {
	if p.Expired {
		return lapses + 1
	}
	return 0
}
