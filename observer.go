package reprise

import (
	"time"

	"reprise/retry"
	"reprise/store"
)

// An Observer hears what the engine decides, as it decides it: attempts
// starting and ending (with the policy's decision), runs ending, leases
// lapsing, stale results refused; and when the engine turns busy and idle.
// Package metrics turns the decisions into Prometheus metrics; package
// reprisetest's clock moves when the engine is idle.
//
// A retry scheduled and a step failed are not events of their own: they
// are AttemptEnded's decision, reported with the attempt whose failure
// decided them. Retry says the step is retried after Delay; a failed
// attempt without Retry failed its step, for StopReason. Every step
// failure is decided on an attempt's failure (its own, its timeout, or its
// lease lapsing), so AttemptEnded reports each one, once.
//
// The engine calls an Observer from its own goroutines, off its locks, and
// waits for each call: implementations must be fast, non-blocking and safe
// for concurrent use (count, don't do I/O). Events are reported after the
// store has recorded them, so a crash may lose the last few; they are for
// watching, not for accounting.
//
// Embed NopObserver to implement only some methods and to keep compiling
// when methods are added.
type Observer interface {
	// AttemptStarted reports an attempt given to a worker: this engine's
	// or a pull worker's.
	AttemptStarted(AttemptInfo)
	// AttemptEnded reports an attempt's outcome and what the step's
	// policy decided: retry after a delay, or stop with a reason.
	AttemptEnded(AttemptEnd)
	// LeaseLapsed reports an attempt whose lease lapsed without a result;
	// an AttemptEnded (timeout or worker_lost) follows.
	LeaseLapsed(AttemptInfo)
	// StaleResultRefused reports a result written with a stale token or
	// after its lease lapsed: the store changed nothing.
	StaleResultRefused(AttemptInfo)
	// RunEnded reports a run that this engine ended, or cancelled, and
	// each active run below it that the store cancelled with it (a child
	// never outlives its parent).
	RunEnded(RunEnd)
	// EngineBusy reports that the engine has work in flight, where it
	// had none: a goroutine of its own at work (claiming, replaying a
	// run, starting an attempt or recording its outcome, firing timers,
	// reaping leases, looking for runs), or a wake-up sent to one and
	// not yet taken. An engine starts idle.
	EngineBusy()
	// EngineIdle reports that the engine has no work in flight any more,
	// but steps attempts inside step code, which the engine does not
	// count as work (a step may wait for the clock: its timeout). It does
	// nothing more until something wakes it: a timer of its Clock, a
	// step returning, a store's notice, or a call (StartRun, Signal,
	// ClaimTasks...). A test clock may move time then (package
	// reprisetest does). A goroutine that has just taken a timer's tick
	// is not counted until it starts its work: a test clock waits a
	// little before it trusts an idle engine.
	//
	// EngineBusy and EngineIdle alternate, one call at a time, in the
	// order the engine turned busy and idle. Unlike the other methods,
	// they are called under a lock of their own, at times while the
	// engine holds its own: they must be quick and must not call the
	// engine.
	EngineIdle(steps int)
}

// NopObserver is an Observer that does nothing; embed it in an Observer
// that needs only some of the methods.
type NopObserver struct{}

func (NopObserver) AttemptStarted(AttemptInfo)     {}
func (NopObserver) AttemptEnded(AttemptEnd)        {}
func (NopObserver) LeaseLapsed(AttemptInfo)        {}
func (NopObserver) StaleResultRefused(AttemptInfo) {}
func (NopObserver) RunEnded(RunEnd)                {}
func (NopObserver) EngineBusy()                    {}
func (NopObserver) EngineIdle(int)                 {}

// AttemptInfo names an attempt.
type AttemptInfo struct {
	RunID   string
	Step    string
	Attempt int
	// Worker is the lease's owner: an engine's WorkerID or a pull
	// worker's name, when known.
	Worker string
	// Execution and Position place the step in its run; IdempotencyKey
	// is the step's.
	Execution, Position int
	IdempotencyKey      string
	// TraceParent is the run's trace context (Run.TraceParent) and
	// Workflow its workflow, filled only for an engine with a
	// Config.Tracer.
	TraceParent, Workflow string
	// Due is when the attempt was planned to start: when its step was
	// scheduled or redriven, or when its retry came due. Started is when
	// it started: the store's claim, or this engine's start of the step's
	// code. AttemptStarted reports both; they are zero elsewhere when
	// not known.
	Due, Started time.Time
}

// AttemptOutcome is how an attempt ended, as AttemptEnd reports it.
type AttemptOutcome string

// The outcomes of an attempt.
const (
	OutcomeOK        AttemptOutcome = "ok"
	OutcomeRetryable AttemptOutcome = "retryable"   // it failed with an error its policy may retry
	OutcomePermanent AttemptOutcome = "permanent"   // it failed with a permanent error
	OutcomeTimeout   AttemptOutcome = "timeout"     // it ran past its timeout or its step's deadline
	OutcomeLost      AttemptOutcome = "worker_lost" // its lease lapsed: its worker vanished
	OutcomeCancelled AttemptOutcome = "cancelled"   // its run or step was cancelled; nothing recorded
)

// ReasonPoison is the StopReason of a step failed because its workers
// kept dying (Config.PoisonAfter); the others are retry's reasons.
const ReasonPoison retry.Reason = "poison"

// AttemptEnd is an attempt's outcome and the decision made on it.
type AttemptEnd struct {
	AttemptInfo
	Outcome AttemptOutcome
	// ErrorType is the failure's type (the first of its type chain, as
	// AttemptFailed records it); empty when the attempt succeeded or was
	// cancelled.
	ErrorType string
	// Duration is how long the attempt ran, by the engine's clock.
	Duration time.Duration
	// Retry says the step is retried after Delay: a retry is scheduled.
	// When false and the attempt failed (not ok, not cancelled), the
	// step failed for StopReason.
	Retry      bool
	Delay      time.Duration
	StopReason retry.Reason
	// StepStarted is when the step's first attempt started, if known.
	StepStarted time.Time
}

// RunEnd is a run that ended.
type RunEnd struct {
	RunID    string
	Workflow string
	Status   RunStatus
	// ParentID is the parent run's id, for a child run.
	ParentID string
	// TraceParent is the run's trace context (Run.TraceParent); Created
	// is when the run was created, if known.
	TraceParent string
	Created     time.Time
}

// outcomeOf classifies an attempt's failure.
func outcomeOf(err error, errType string) AttemptOutcome {
	switch {
	case err == nil:
		return OutcomeOK
	case errType == TypeTimeout || errType == TypeDeadlineExceeded:
		return OutcomeTimeout
	case errType == TypeWorkerLost || errType == TypePoison:
		return OutcomeLost
	case retry.IsPermanent(err):
		return OutcomePermanent
	}
	return OutcomeRetryable
}

// attemptInfo names attempt t, with its run's trace context for a Tracer.
func (e *Engine) attemptInfo(t *store.Task) AttemptInfo {
	a := AttemptInfo{RunID: t.RunID, Step: t.Step, Attempt: t.Attempt, Worker: t.Owner,
		Execution: t.Execution, Position: t.Position, IdempotencyKey: t.IdempotencyKey,
		Due: t.ReadyAt, Started: t.StartedAt}
	if e.cfg.Tracer != nil {
		a.TraceParent, a.Workflow = e.runTrace(t.RunID)
	}
	return a
}

// ResidentRuns returns how many runs this engine holds in memory: the
// runs whose workflow code it executes, parked or at work.
func (e *Engine) ResidentRuns() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.replayers)
}

// attemptEnd is attempt t ended with outcome, as long as it ran since it
// started.
func (e *Engine) attemptEnd(t *store.Task, outcome AttemptOutcome) AttemptEnd {
	end := AttemptEnd{AttemptInfo: e.attemptInfo(t), Outcome: outcome, StepStarted: t.FirstStartedAt}
	if !t.StartedAt.IsZero() {
		end.Duration = max(e.clock.Now().Sub(t.StartedAt), 0)
	}
	return end
}

// observeFail reports a failed attempt whose failure p was recorded.
func (e *Engine) observeFail(t *store.Task, err error, p *store.TaskFailParams) {
	end := e.attemptEnd(t, outcomeOf(err, p.Error.Type))
	end.ErrorType, end.Retry = p.Error.Type, p.Retry
	if p.Retry {
		end.Delay = p.Delay
	} else {
		end.StopReason = retry.Reason(p.Reason)
		if p.Error.Type == TypePoison {
			end.StopReason = ReasonPoison
		}
	}
	e.cfg.Observer.AttemptEnded(end)
}

// observeOK reports a successful attempt, recorded or handed to its run.
func (e *Engine) observeOK(t *store.Task) {
	if e.cfg.Observer == nil {
		return
	}
	e.cfg.Observer.AttemptEnded(e.attemptEnd(t, OutcomeOK))
}

// observeStale reports a result the store refused.
func (e *Engine) observeStale(t *store.Task) {
	if e.cfg.Observer != nil {
		e.cfg.Observer.StaleResultRefused(e.attemptInfo(t))
	}
}
