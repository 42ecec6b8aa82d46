package store

import "slices"

// Redrive decides RunRedrive of a run of status. last returns the last
// step outcome of the run's current execution (LastStepEnd), or the zero
// Event for none; it is called only for a failed run. Redrive returns
// RunRedriven{Position, Step, By} for the step of that outcome if
// it is a StepFailed, and ErrNotRedrivable otherwise. The store then makes
// that step's task, kept as it was when the step failed, ready again.
func (p *RunRedriveParams) Redrive(status RunStatus, last func() (Event, error)) (Event, error) {
	if status != RunFailed {
		return Event{}, ErrNotRedrivable
	}
	failed, err := last()
	if err != nil {
		return Event{}, err
	}
	if failed.Type != EventStepFailed {
		return Event{}, ErrNotRedrivable
	}
	return Event{Type: EventRunRedriven, Position: failed.Position, Step: failed.Step, By: p.By}, nil
}

// LastStepEnd returns the last StepCompleted or StepFailed of execution
// among events, in history order, and whether there is one. A store that
// reads a run's history newest first asks it of each part it reads, until
// one has it: the outcome RunRedrive looks for is most often near the end.
func LastStepEnd(events []Event, execution int) (Event, bool) {
	for _, e := range slices.Backward(events) {
		if e.Execution == execution && (e.Type == EventStepCompleted || e.Type == EventStepFailed) {
			return e, true
		}
	}
	return Event{}, false
}
