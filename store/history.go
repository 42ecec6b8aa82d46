package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// EventType names an entry in a run's history.
type EventType string

// EndsRun reports whether an event of type t ends its run: RunCompleted,
// RunFailed or RunCancelled (a continue-as-new starts the next execution).
func (t EventType) EndsRun() bool {
	return t == EventRunCompleted || t == EventRunFailed || t == EventRunCancelled
}

// The event types of a run's history, in the order they typically appear.
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

// Event types of the workflow features beyond those: select
// cancellation, versioning, signals, child runs, continue-as-new, redrive.
const (
	// EventStepCancelRequested: a step lost a select; its task was
	// dropped and a late result is rejected.
	EventStepCancelRequested EventType = "StepCancelRequested"
	// EventVersionMarker: the workflow took version Version of change
	// Change.
	EventVersionMarker EventType = "VersionMarker"
	// EventSignalReceived: signal Signal arrived with payload Input.
	EventSignalReceived EventType = "SignalReceived"
	// EventChildStarted: child run Child of workflow Workflow started at
	// Position with Input.
	EventChildStarted EventType = "ChildStarted"
	// EventChildCompleted and EventChildFailed: the child at Position
	// ended; Output, or Error and ChildStatus.
	EventChildCompleted EventType = "ChildCompleted"
	EventChildFailed    EventType = "ChildFailed"
	// EventRunContinuedAsNew: the execution ended and execution+1 starts
	// with Input; a RunStarted of the new execution follows.
	EventRunContinuedAsNew EventType = "RunContinuedAsNew"
	// EventRunRedriven: the failed step Step at Position gets a fresh
	// attempt budget; By says who redrove it.
	EventRunRedriven EventType = "RunRedriven"
)

// An Event is one entry of a run's append-only history. Which fields are set
// depends on Type; the stores encode the whole event, so adding a field needs
// no migration. Each field holds one thing, whatever the type: a name is in
// Step, Signal or Change, a why in Reason, a who in By.
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
	// Step is the step's name (the step events, RunRedriven).
	Step string `json:"step,omitempty"`
	// Signal is the signal's name (SignalReceived).
	Signal string `json:"signal,omitempty"`
	// Change is the change id a VersionMarker records a version of.
	Change string `json:"change,omitempty"`
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
	// a run was cancelled (RunCancelled).
	Reason string `json:"reason,omitempty"`
	// By says who redrove the run (RunRedriven).
	By string `json:"by,omitempty"`
	// FireAt is when a timer fires (TimerScheduled).
	FireAt time.Time `json:"fire_at,omitzero"`
	// Version is the version a VersionMarker records, or the version of
	// the stored step definition a StepScheduled's step was scheduled
	// under (0 for none).
	Version int `json:"version,omitempty"`
	// Child is the id of a child run (ChildStarted, ChildCompleted,
	// ChildFailed).
	Child string `json:"child,omitempty"`
	// ChildStatus is the final status of a child run that did not
	// complete: failed or cancelled (ChildFailed).
	ChildStatus RunStatus `json:"child_status,omitempty"`
}

// ErrorInfo is an error as the history keeps it.
type ErrorInfo struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	// Step, Position, Attempts and Reason are set on the error of a run
	// that failed because a step failed for good (see StepError), and so
	// on its RunFailed and on a parent's ChildFailed: the step's name and
	// position, how many attempts it made and why it stopped (exhausted,
	// permanent, not_covered, deadline). Type and Message are then the
	// step's last error.
	Step     string `json:"step,omitempty"`
	Position int    `json:"position,omitempty"`
	Attempts int    `json:"attempts,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// Stack is kept for panics.
	Stack string `json:"stack,omitempty"`
}

// eventJSON is Event without its methods, for decoding.
type eventJSON Event

// MarshalJSON encodes an event in the wire form of the HTTP API, which is
// also how stores keep it: the delay is delay_ms, in milliseconds with a
// fraction, so that it round-trips to the nanosecond.
func (e Event) MarshalJSON() ([]byte, error) {
	return e.AppendJSON(make([]byte, 0, 256))
}

// AppendJSON appends the event's JSON (as MarshalJSON) to b. Fields left
// zero are omitted, Seq and At too, so that a store which keeps those in
// columns can zero them and keep the rest as the event's body.
//
// It is written out by hand, without reflection: every transition encodes
// its events on the store's write path, where encoding/json cost as much as
// the inserts. A test checks it against encoding/json.
func (e Event) AppendJSON(b []byte) ([]byte, error) {
	b = append(b, '{')
	if e.Seq != 0 {
		b = strconv.AppendInt(append(b, `"seq":`...), e.Seq, 10)
		b = append(b, ',')
	}
	b = appendString(append(b, `"type":`...), string(e.Type))
	var err error
	b = appendTime(b, `,"at":`, e.At)
	b = appendInt(b, `,"execution":`, e.Execution)
	b = appendField(b, `,"workflow":`, e.Workflow)
	b = appendInt(b, `,"position":`, e.Position)
	b = appendField(b, `,"step":`, e.Step)
	b = appendField(b, `,"signal":`, e.Signal)
	b = appendField(b, `,"change":`, e.Change)
	b = appendInt(b, `,"attempt":`, e.Attempt)
	if b, err = appendRaw(b, `,"input":`, e.Input); err != nil {
		return nil, fmt.Errorf("event input: %w", err)
	}
	if b, err = appendRaw(b, `,"output":`, e.Output); err != nil {
		return nil, fmt.Errorf("event output: %w", err)
	}
	if e.Error != nil {
		b = e.Error.appendJSON(append(b, `,"error":`...))
	}
	b = appendField(b, `,"policy":`, e.Policy)
	b = appendField(b, `,"idempotency_key":`, e.IdempotencyKey)
	b = appendField(b, `,"worker":`, e.Worker)
	b = appendTime(b, `,"lease_until":`, e.LeaseUntil)
	b = appendTime(b, `,"retry_at":`, e.RetryAt)
	b = appendField(b, `,"rule":`, e.Rule)
	b = appendField(b, `,"reason":`, e.Reason)
	b = appendField(b, `,"by":`, e.By)
	b = appendTime(b, `,"fire_at":`, e.FireAt)
	b = appendInt(b, `,"version":`, e.Version)
	b = appendField(b, `,"child":`, e.Child)
	b = appendField(b, `,"child_status":`, string(e.ChildStatus))
	if e.Delay != 0 || !e.RetryAt.IsZero() || e.Type == EventTimerScheduled {
		ms := float64(e.Delay) / float64(time.Millisecond)
		b = strconv.AppendFloat(append(b, `,"delay_ms":`...), ms, 'f', -1, 64)
	}
	return append(b, '}'), nil
}

func (ei *ErrorInfo) appendJSON(b []byte) []byte {
	b = appendString(append(b, `{"type":`...), ei.Type)
	b = appendString(append(b, `,"message":`...), ei.Message)
	b = appendField(b, `,"step":`, ei.Step)
	b = appendInt(b, `,"position":`, ei.Position)
	b = appendInt(b, `,"attempts":`, ei.Attempts)
	b = appendField(b, `,"reason":`, ei.Reason)
	b = appendField(b, `,"stack":`, ei.Stack)
	return append(b, '}')
}

// appendField appends key and s unless s is empty (omitempty).
func appendField(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return appendString(append(b, key...), s)
}

// appendInt appends key and n unless n is zero (omitempty).
func appendInt(b []byte, key string, n int) []byte {
	if n == 0 {
		return b
	}
	return strconv.AppendInt(append(b, key...), int64(n), 10)
}

// appendTime appends key and t as encoding/json does, unless t is zero
// (omitzero).
func appendTime(b []byte, key string, t time.Time) []byte {
	if t.IsZero() {
		return b
	}
	b = append(append(b, key...), '"')
	return append(t.AppendFormat(b, time.RFC3339Nano), '"')
}

// appendRaw appends key and a JSON document unless it is empty. A document
// of plain printable ASCII is appended as it is: every document the engine
// keeps was produced by an encoder or checked when it came in, so only
// one with spaces or other bytes to mind takes the slow way, compacted
// (and so checked) by encoding/json.
func appendRaw(b []byte, key string, m json.RawMessage) ([]byte, error) {
	if len(m) == 0 {
		return b, nil
	}
	b = append(b, key...)
	if plain(m) {
		return append(b, m...), nil
	}
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, m); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// plain reports whether m holds only printable ASCII other than space, and
// none of the characters encoding/json escapes for HTML.
func plain(m []byte) bool {
	for _, c := range m {
		if c <= ' ' || c >= 0x7f || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// appendString appends s as a JSON string, escaped as encoding/json
// escapes it (HTML characters and U+2028/U+2029 too; invalid UTF-8
// becomes U+FFFD).
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= ' ' && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(append(b, s[start:i]...), `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(append(b, s[start:i]...), '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(append(b, s[start:]...), '"')
}

// UnmarshalJSON decodes what MarshalJSON encodes, and the older form of
// the events whose fields were once shared (see upgrade).
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
	e.upgrade()
	return nil
}

// upgrade moves what an event of the older form holds in a shared field
// to the field of its own: before Signal, Change, By and ChildStatus,
// a SignalReceived kept the signal's name in step, a VersionMarker its
// change id in step, a RunRedriven who redrove the run in reason and a
// ChildFailed the child's status in reason. Histories stored then stay
// readable as they are, with no migration: these types never set step or
// reason for anything else, so an event of the new form is left as it is.
func (e *Event) upgrade() {
	switch e.Type {
	case EventSignalReceived:
		if e.Signal == "" {
			e.Signal, e.Step = e.Step, ""
		}
	case EventVersionMarker:
		if e.Change == "" {
			e.Change, e.Step = e.Step, ""
		}
	case EventRunRedriven:
		if e.By == "" {
			e.By, e.Reason = e.Reason, ""
		}
	case EventChildFailed:
		if e.ChildStatus == "" {
			e.ChildStatus, e.Reason = RunStatus(e.Reason), ""
		}
	}
}
