package reprise

import (
	"errors"
	"fmt"
	"time"

	"reprise/retry"
)

// Causes with which the engine cancels contexts; read them with
// context.Cause.
var (
	// ErrCancelled: the run was cancelled.
	ErrCancelled = errors.New("run cancelled")
	// ErrShutdown: the engine is shutting down.
	ErrShutdown = errors.New("engine shutting down")
	// ErrTimeout: the attempt exceeded its timeout.
	ErrTimeout = errors.New("attempt timed out")
	// ErrStepCancelled: the step lost a Select; its attempt is cancelled
	// with this cause and its future fails with it.
	ErrStepCancelled = errors.New("step cancelled: it lost a select")
)

// ErrNotRegistered: StartRun names a workflow this engine does not have.
var ErrNotRegistered = errors.New("not registered")

// Error types the engine itself gives to failed attempts and runs.
const (
	TypeTimeout          = "Timeout"
	TypePanic            = "Panic"
	TypeDeadlineExceeded = "DeadlineExceeded"
	TypeNondeterminism   = "Nondeterminism"
	// TypePoison: the attempt's workers died PoisonAfter times in a row.
	TypePoison = "Poison"
)

// Permanent wraps err so that the step is never retried.
func Permanent(err error) error { return retry.Permanent(err) }

// RetryAfter wraps err with a hint that the next attempt should start no
// sooner than d from now.
func RetryAfter(d time.Duration, err error) error { return retry.RetryAfter(d, err) }

// A StepError is how a workflow sees a step that failed for good: its last
// error, how many attempts it made and why it stopped. It is rebuilt from
// the history, so it is the same on every replay.
type StepError struct {
	Step     string
	Position int
	// Attempts is how many attempts were made.
	Attempts int
	// Reason is why the step stopped: exhausted, permanent, not_covered or
	// deadline.
	Reason retry.Reason
	// Type and Message are the last attempt's error.
	Type    string
	Message string
}

func (e *StepError) Error() string {
	return fmt.Sprintf("step %s (position %d) failed after %d attempt(s), %s: %s: %s",
		e.Step, e.Position, e.Attempts, e.Reason, e.Type, e.Message)
}

// Unwrap returns the last error as a *retry.Error, so that errors.As and
// error types work on it as they did on the original.
func (e *StepError) Unwrap() error {
	return &retry.Error{Type: e.Type, Message: e.Message, Retryable: e.Reason != retry.ReasonPermanent}
}

// A NondeterminismError says the workflow code no longer matches its
// history: the run fails with it rather than guess.
type NondeterminismError struct {
	Position int
	// Recorded is what the history holds at Position ("" for nothing).
	Recorded string
	// Called is what the code asked for ("" for nothing).
	Called string
}

func (e *NondeterminismError) Error() string {
	switch {
	case e.Recorded == "":
		return fmt.Sprintf("nondeterminism at position %d: code calls %s, history has nothing there", e.Position, e.Called)
	case e.Called == "":
		return fmt.Sprintf("nondeterminism at position %d: history has %s, code no longer calls it", e.Position, e.Recorded)
	}
	return fmt.Sprintf("nondeterminism at position %d: history has %s, code calls %s", e.Position, e.Recorded, e.Called)
}

// ErrorType implements the type name used by policies.
func (e *NondeterminismError) ErrorType() string { return TypeNondeterminism }

// A RunError is the error of a failed run, as Result returns it.
type RunError struct {
	RunID   string
	Type    string
	Message string
}

func (e *RunError) Error() string {
	return fmt.Sprintf("run %s failed: %s: %s", e.RunID, e.Type, e.Message)
}

// ErrorType implements the type name used by policies.
func (e *RunError) ErrorType() string { return e.Type }

// errorInfo turns an error into its history form: the first name of its
// type chain, and its message.
func errorInfo(err error) *ErrorInfo {
	info := &ErrorInfo{Type: "Error", Message: err.Error()}
	if types := retry.TypeChain(err); len(types) > 0 {
		info.Type = types[0]
	}
	// A typed error says its type apart from its message; keep them apart.
	if re, ok := errors.AsType[*retry.Error](err); ok && re.Type == info.Type && re.Error() == info.Message {
		info.Message = re.Message
	}
	return info
}

// A ChildError is how a workflow sees a child run that did not complete.
type ChildError struct {
	RunID string
	// Status is the child's final status: failed or cancelled.
	Status  RunStatus
	Type    string
	Message string
}

func (e *ChildError) Error() string {
	return fmt.Sprintf("child run %s %s: %s: %s", e.RunID, e.Status, e.Type, e.Message)
}

// ErrorType names the child's error type, so that a child's policy can
// filter on it.
func (e *ChildError) ErrorType() string { return e.Type }
