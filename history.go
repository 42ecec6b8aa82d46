package reprise

import (
	"encoding/json"
	"math"
	"time"
)

// EventType names an entry in a run's history.
type EventType string

// The event types of SPEC §6, in the order they typically appear.
const (
	EventRunStarted     EventType = "RunStarted"
	EventStepScheduled  EventType = "StepScheduled"
	EventAttemptStarted EventType = "AttemptStarted"
	EventAttemptFailed  EventType = "AttemptFailed"
	EventStepCompleted  EventType = "StepCompleted"
	EventStepFailed     EventType = "StepFailed"
	EventTimerScheduled EventType = "TimerScheduled"
	EventTimerFired     EventType = "TimerFired"
	EventRunCompleted   EventType = "RunCompleted"
	EventRunFailed      EventType = "RunFailed"
	EventRunCancelled   EventType = "RunCancelled"
)

// Event types of the workflow features beyond SPEC §6: select
// cancellation, versioning, signals, child runs, continue-as-new, redrive.
const (
	// EventStepCancelRequested: a step lost a select; its task was
	// dropped and a late result is rejected.
	EventStepCancelRequested EventType = "StepCancelRequested"
	// EventVersionMarker: the workflow took version Version of change Step.
	EventVersionMarker EventType = "VersionMarker"
	// EventSignalReceived: signal Step arrived with payload Input.
	EventSignalReceived EventType = "SignalReceived"
	// EventChildStarted: child run Child of workflow Workflow started at
	// Position with Input.
	EventChildStarted EventType = "ChildStarted"
	// EventChildCompleted and EventChildFailed: the child at Position
	// ended; Output, or Error and Reason (its status).
	EventChildCompleted EventType = "ChildCompleted"
	EventChildFailed    EventType = "ChildFailed"
	// EventRunContinuedAsNew: the execution ended and execution+1 starts
	// with Input; a RunStarted of the new execution follows.
	EventRunContinuedAsNew EventType = "RunContinuedAsNew"
	// EventRunRedriven: the failed step at Position gets a fresh attempt
	// budget; Reason says who redrove it.
	EventRunRedriven EventType = "RunRedriven"
)

// An Event is one entry of a run's append-only history. Which fields are set
// depends on Type; the stores encode the whole event, so adding a field needs
// no migration.
type Event struct {
	// Seq numbers the run's events from 1, without gaps.
	Seq  int64     `json:"seq"`
	Type EventType `json:"type"`
	// At is the store's time when the event was appended.
	At time.Time `json:"at"`
	// Execution is the run's execution the event belongs to, from 1.
	Execution int `json:"execution,omitempty"`

	// Workflow is set on RunStarted.
	Workflow string `json:"workflow,omitempty"`
	// Position is the step's or timer's place in the workflow's sequence of
	// calls, from 1.
	Position int `json:"position,omitempty"`
	// Step is the step's name.
	Step string `json:"step,omitempty"`
	// Attempt is the attempt's number, from 1. On StepFailed it is the
	// number of attempts made.
	Attempt int `json:"attempt,omitempty"`

	// Input is the run's input (RunStarted) or the step's (StepScheduled).
	Input json.RawMessage `json:"input,omitempty"`
	// Output is the step's result (StepCompleted) or the run's (RunCompleted).
	Output json.RawMessage `json:"output,omitempty"`
	// Error is the attempt's, step's or run's error.
	Error *ErrorInfo `json:"error,omitempty"`

	// Policy is the step's policy in canonical text form (StepScheduled).
	Policy string `json:"policy,omitempty"`
	// IdempotencyKey is the step's key, the same for every attempt.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Worker names who holds the attempt's lease (AttemptStarted).
	Worker string `json:"worker,omitempty"`
	// LeaseUntil is when the attempt's lease lapses (AttemptStarted).
	LeaseUntil time.Time `json:"lease_until,omitzero"`

	// Delay is the wait before the retry (AttemptFailed) or the timer's
	// duration (TimerScheduled). JSON has it as delay_ms.
	Delay time.Duration `json:"-"`
	// RetryAt is when the next attempt becomes ready (AttemptFailed).
	RetryAt time.Time `json:"retry_at,omitzero"`
	// Rule is the policy rule that decided, in text form (AttemptFailed).
	Rule string `json:"rule,omitempty"`
	// Reason says why a step or run stopped: exhausted, permanent,
	// not_covered, deadline (AttemptFailed that stops, StepFailed), or why
	// a run was cancelled.
	Reason string `json:"reason,omitempty"`
	// FireAt is when a timer fires (TimerScheduled).
	FireAt time.Time `json:"fire_at,omitzero"`
	// Version is the version a VersionMarker records.
	Version int `json:"version,omitempty"`
	// Child is the id of a child run (ChildStarted, ChildCompleted,
	// ChildFailed).
	Child string `json:"child,omitempty"`
}

// ErrorInfo is an error as the history keeps it.
type ErrorInfo struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	// Stack is kept for panics.
	Stack string `json:"stack,omitempty"`
}

// eventJSON is Event without its methods, for the encoding below.
type eventJSON Event

// MarshalJSON encodes an event in the wire form of the HTTP API, which is
// also how stores keep it: the delay is delay_ms, in milliseconds with a
// fraction, so that it round-trips to the nanosecond.
func (e Event) MarshalJSON() ([]byte, error) {
	var ms *float64
	if e.Delay != 0 || !e.RetryAt.IsZero() || e.Type == EventTimerScheduled {
		v := float64(e.Delay) / float64(time.Millisecond)
		ms = &v
	}
	return json.Marshal(struct {
		eventJSON
		DelayMS *float64 `json:"delay_ms,omitempty"`
	}{eventJSON(e), ms})
}

// UnmarshalJSON decodes what MarshalJSON encodes.
func (e *Event) UnmarshalJSON(b []byte) error {
	var v struct {
		eventJSON
		DelayMS float64 `json:"delay_ms"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*e = Event(v.eventJSON)
	e.Delay = time.Duration(math.Round(v.DelayMS * float64(time.Millisecond)))
	return nil
}
