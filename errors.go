package reprise

import (
	"cmp"
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
	// ErrDeadline: the step's deadline passed while the attempt ran.
	ErrDeadline = errors.New("step deadline passed")
	// ErrStepCancelled: the step lost a Select; its attempt is cancelled
	// with this cause and its future fails with it.
	ErrStepCancelled = errors.New("step cancelled: it lost a select")
)

// ErrNotRegistered: StartRun names a workflow this engine does not have.
var ErrNotRegistered = errors.New("not registered")

// The longest texts an action on a run takes, in bytes: a signal's name,
// and a cancel's reason or a redrive's "by", which its history keeps.
const (
	MaxSignalName = 200
	MaxReason     = 500
)

// An ArgumentError is an argument an action on a run refuses, before it
// changes anything: Name names it (name, reason, by).
type ArgumentError struct {
	Name, Problem string
}

func (e *ArgumentError) Error() string { return e.Name + ": " + e.Problem }

// checkText refuses text named name that is longer than most bytes, or
// empty when required.
func checkText(name, text string, most int, required bool) error {
	switch {
	case required && text == "":
		return &ArgumentError{name, "is required"}
	case len(text) > most:
		return &ArgumentError{name, fmt.Sprintf("has %d bytes; at most %d", len(text), most)}
	}
	return nil
}

// Error types the engine itself gives to failed attempts and runs.
const (
	// TypeTimeout: the attempt ran past its policy's timeout.
	TypeTimeout = "Timeout"
	// TypeWorkerLost: the attempt's worker vanished (a crash, a kill, a
	// pull worker that stopped heartbeating) before its time limit.
	TypeWorkerLost = "WorkerLost"
	// TypeDeadlineExceeded: the attempt was still running when its step's
	// deadline passed.
	TypeDeadlineExceeded = "DeadlineExceeded"
	TypePanic            = "Panic"
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
//
// A workflow that returns a StepError, as it is or wrapped in errors of no
// type of their own (fmt.Errorf with %w, errors.Join, Permanent), fails
// its run with the step's error: the run's ErrorInfo and RunError have
// the step's Type and Message (the wrappers' words are not kept) and say
// which step it was. An error type of the workflow's own that wraps the
// StepError names the run's error instead.
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

// ErrorType is the type of the step's last error, so that the type chain
// of a StepError, or of an error that wraps one, names the step's error
// rather than StepError.
func (e *StepError) ErrorType() string { return cmp.Or(e.Type, "StepError") }

// Unwrap returns a new *retry.Error with the last error's Type and
// Message, retryable unless the step stopped as permanent. The history
// keeps only an error's type name and message, so the Go value the step
// returned is gone: errors.As finds a *retry.Error, never the step's own
// error type; match the step's error by Type (or retry.TypeChain).
func (e *StepError) Unwrap() error {
	return &retry.Error{Type: e.Type, Message: e.Message, Retryable: e.Reason != retry.ReasonPermanent}
}

// info is the error of a run that failed with e.
func (e *StepError) info() *ErrorInfo {
	return &ErrorInfo{Type: e.Type, Message: e.Message, Step: e.Step, Position: e.Position,
		Attempts: e.Attempts, Reason: string(e.Reason)}
}

// stepError is the StepError an error that failed a run came from, or nil
// when it did not come from a step (see StepError).
func stepError(info *ErrorInfo) *StepError {
	if info == nil || info.Step == "" {
		return nil
	}
	return &StepError{Step: info.Step, Position: info.Position, Attempts: info.Attempts,
		Reason: retry.Reason(info.Reason), Type: info.Type, Message: info.Message}
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

// A RunError is the error of a failed run, as Result returns it. When the
// run failed because a step failed for good (its workflow returned the
// step's StepError, see there), Type and Message are the step's last
// error and StepError says which step it was; errors.As finds it:
//
//	var stepErr *reprise.StepError
//	if errors.As(err, &stepErr) { ... stepErr.Step, stepErr.Reason ... }
type RunError struct {
	RunID   string
	Type    string
	Message string
	// StepError is the step that failed the run, or nil.
	StepError *StepError
}

func (e *RunError) Error() string {
	if e.StepError != nil {
		return fmt.Sprintf("run %s failed: %v", e.RunID, e.StepError)
	}
	return fmt.Sprintf("run %s failed: %s: %s", e.RunID, e.Type, e.Message)
}

// ErrorType implements the type name used by policies.
func (e *RunError) ErrorType() string { return e.Type }

// Unwrap returns the StepError that failed the run, or nil.
func (e *RunError) Unwrap() error {
	if e.StepError == nil {
		return nil
	}
	return e.StepError
}

// runErrorInfo is the error of a run whose workflow returned err: for a
// StepError (see there), the step's error and which step it was; else as
// errorInfo.
func runErrorInfo(err error) *ErrorInfo {
	if se, ok := firstNamed(err).(*StepError); ok {
		return se.info()
	}
	return errorInfo(err)
}

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

// firstNamed returns the first error in err's tree, depth first, that has
// a type name of its own (retry.TypeName): the one whose name leads the
// type chain. It is nil when none has.
func firstNamed(err error) error {
	for err != nil {
		if _, ok := retry.TypeName(err); ok {
			return err
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if named := firstNamed(e); named != nil {
					return named
				}
			}
			return nil
		default:
			return nil
		}
	}
	return nil
}

// A ChildError is how a workflow sees a child run that did not complete.
// Its type is the child's error type; StepError says which of the child's
// steps failed it, if one did. It does not unwrap to that StepError, so
// that ChildRun's policy sees the child's failure as before, retryable
// whatever the step's reason. A workflow that returns a ChildError fails
// with the child's type and the ChildError's message, naming no step of
// its own.
type ChildError struct {
	RunID string
	// Status is the child's final status: failed or cancelled.
	Status  RunStatus
	Type    string
	Message string
	// StepError is the child's step that failed the child, or nil; its
	// Position is in the child's history.
	StepError *StepError
}

func (e *ChildError) Error() string {
	return fmt.Sprintf("child run %s %s: %s: %s", e.RunID, e.Status, e.Type, e.Message)
}

// ErrorType names the child's error type, so that a child's policy can
// filter on it.
func (e *ChildError) ErrorType() string { return e.Type }
