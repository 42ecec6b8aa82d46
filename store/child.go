package store

import "encoding/json"

// The reasons of the RunCancelled of a child run cancelled because its
// parent ended: a child never outlives its parent.
const (
	// ReasonParentFinished: the parent completed, failed, was cancelled
	// by its workflow or continued as new.
	ReasonParentFinished = "parent finished"
	// ReasonParentCancelled: the parent was cancelled (RunCancel), or was
	// itself cancelled because its own parent ended.
	ReasonParentCancelled = "parent cancelled"
)

// Cancelled returns the event RunCancel appends to the run it cancels:
// RunCancelled{Reason}.
func (p *RunCancelParams) Cancelled() Event {
	return Event{Type: EventRunCancelled, Reason: p.Reason}
}

// ParentEnded returns the event appended to an active child run whose
// parent ends, which cancels it, and so in turn its own active children:
// RunCancelled{Reason: ReasonParentCancelled} when the parent was
// cancelled (RunCancel, or by its own parent's end), ReasonParentFinished
// when its workflow ended it (RunAdvance's Finish).
func ParentEnded(cancelled bool) Event {
	if cancelled {
		return Event{Type: EventRunCancelled, Reason: ReasonParentCancelled}
	}
	return Event{Type: EventRunCancelled, Reason: ReasonParentFinished}
}

// ParentWaits reports whether a parent run of status, now in execution,
// still waits for the children that its execution startedIn started: only
// while it is active and in that execution. Only then is a child's end
// appended to it (ChildEnded).
func ParentWaits(status RunStatus, execution, startedIn int) bool {
	return !status.Final() && execution == startedIn
}

// ChildEnded returns the event that the end of child run child, with
// status, output and error, appends to its parent, at the position in the
// parent's workflow that started it: ChildCompleted{Output} for a child
// that completed, ChildFailed{Error, ChildStatus: status} for one that
// failed or was cancelled.
func ChildEnded(child string, position int, status RunStatus, output json.RawMessage, err *ErrorInfo) Event {
	if status == RunCompleted {
		return Event{Type: EventChildCompleted, Position: position, Child: child, Output: output}
	}
	return Event{Type: EventChildFailed, Position: position, Child: child, Error: err, ChildStatus: status}
}
