package store

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Check reports what is wrong with p before any write: a run needs an id
// and a workflow, and a first advance an owner and what RunAdvanceParams'
// Check asks.
func (p *RunCreateParams) Check() error {
	var errs []error
	if p.ID == "" || p.Workflow == "" {
		errs = append(errs, errors.New("id and workflow are required"))
	}
	if p.First != nil {
		if p.Owner == "" {
			errs = append(errs, errors.New("a first advance needs an owner"))
		}
		if err := p.First.Check(); err != nil {
			errs = append(errs, fmt.Errorf("first advance: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Started returns the event that opens the history of the run p creates:
// RunStarted{Execution: 1, Workflow, Input}.
func (p *RunCreateParams) Started() Event {
	return Event{Type: EventRunStarted, Execution: 1, Workflow: p.Workflow, Input: p.Input}
}

// Check reports what is wrong with p before any write: a Finish that is
// not an end state, steps to lease without LeaseOwner and LeaseTTL,
// children without an id or a workflow.
func (p *RunAdvanceParams) Check() error {
	var errs []error
	if f := p.Finish; f != nil && !f.ContinueAsNew && !f.Status.Final() {
		errs = append(errs, fmt.Errorf("finish with status %q: not an end state", f.Status))
	}
	if (p.LeaseOwner == "" || p.LeaseTTL <= 0) && slices.ContainsFunc(p.Steps, func(st StepSpec) bool { return st.Lease }) {
		errs = append(errs, errors.New("a step to lease at once needs a lease owner and a lease TTL"))
	}
	for _, c := range p.Children {
		if c.ID == "" || c.Workflow == "" {
			errs = append(errs, fmt.Errorf("child at position %d: id and workflow are required", c.Position))
		}
	}
	return errors.Join(errs...)
}

// A Scheduled is an entry of an advance's plan (RunAdvanceParams.Plan): an
// event the advance appends for what the workflow scheduled, and what the
// store makes for it.
type Scheduled struct {
	// Event is StepScheduled, AttemptStarted (of a step leased at once,
	// right after its StepScheduled), TimerScheduled, VersionMarker or
	// ChildStarted. An Execution left zero is the run's current one.
	Event Event
	// Step is the step of StepScheduled and AttemptStarted, Timer the timer
	// of TimerScheduled and Child the child run of ChildStarted, which the
	// store creates as ChildRun says.
	Step  *StepSpec
	Timer *TimerSpec
	Child *ChildSpec
	// Make says that the store makes the entry's row: the ready task of a
	// StepScheduled, the leased Task of an AttemptStarted, the timer of a
	// TimerScheduled. None is made when the advance ends the run's
	// execution (Finish), whose tasks and timers it would drop, nor at a
	// position it cancels (Cancels).
	Make bool
	// Task is the task an AttemptStarted leases, to be made, set by Stamp.
	Task *Task
}

// Timed reports whether Stamp sets the entry's event: an encoding of it
// made ahead of the write's time would be stale.
func (s *Scheduled) Timed() bool {
	return s.Event.Type == EventTimerScheduled || s.Event.Type == EventAttemptStarted
}

// Plan returns what the workflow scheduled, in the order of positions
// (steps, then timers, markers and children, at the same position): the
// events of the advance before its cancels (CancelRequests) and its end
// (RunFinish), and the rows to make for them. It depends on p alone, so a
// store may encode the events ahead of its write; the times are set by
// Stamp, in the write.
func (p *RunAdvanceParams) Plan() []Scheduled {
	starts := p.Finish == nil // else the execution ends in this advance
	n := len(p.Steps) + len(p.Timers) + len(p.Markers) + len(p.Children)
	if starts {
		for i := range p.Steps {
			if p.Steps[i].Lease {
				n++
			}
		}
	}
	plan := make([]Scheduled, 0, n)
	for i := range p.Steps {
		st := &p.Steps[i]
		makes := starts && !slices.Contains(p.Cancels, st.Position)
		plan = append(plan, Scheduled{Step: st, Make: makes && !st.Lease, Event: Event{
			Type: EventStepScheduled, Position: st.Position, Step: st.Name, Input: st.Input,
			Policy: st.PolicyText, IdempotencyKey: st.IdempotencyKey, Version: st.StepVersion,
		}})
		if starts && st.Lease {
			plan = append(plan, Scheduled{Step: st, Make: makes, Event: Event{
				Type: EventAttemptStarted, Position: st.Position, Step: st.Name, Attempt: 1,
			}})
		}
	}
	for i := range p.Timers {
		tm := &p.Timers[i]
		plan = append(plan, Scheduled{Timer: tm, Make: starts && !slices.Contains(p.Cancels, tm.Position), Event: Event{
			Type: EventTimerScheduled, Position: tm.Position, Delay: tm.Delay,
		}})
	}
	for _, m := range p.Markers {
		plan = append(plan, Scheduled{Event: Event{
			Type: EventVersionMarker, Position: m.Position, Change: m.Name, Version: m.Version,
		}})
	}
	for i := range p.Children {
		c := &p.Children[i]
		plan = append(plan, Scheduled{Child: c, Event: Event{
			Type: EventChildStarted, Position: c.Position, Child: c.ID, Workflow: c.Workflow, Input: c.Input,
		}})
	}
	// Stable, so that tasks get their ids in position order and claims of
	// tasks ready at the same time follow the workflow's order. The usual
	// plan is in order already: the sort, which copies the large entries,
	// is skipped.
	byPosition := func(a, b Scheduled) int { return cmp.Compare(a.Event.Position, b.Event.Position) }
	if !slices.IsSortedFunc(plan, byPosition) {
		slices.SortStableFunc(plan, byPosition)
	}
	return plan
}

// Stamp sets the times of a plan (from Plan) written at now to the run's
// execution: a timer's FireAt (now + Delay), and the leased Task of an
// AttemptStarted, whose first attempt starts at now, leased to LeaseOwner
// for LeaseTTL (Task.Start), with its event.
func (p *RunAdvanceParams) Stamp(plan []Scheduled, execution int, now Now) {
	for i := range plan {
		s := &plan[i]
		switch s.Event.Type {
		case EventTimerScheduled:
			s.Event.FireAt = now.Add(s.Timer.Delay)
		case EventAttemptStarted:
			st := s.Step
			t := Task{
				RunID: p.RunID, Execution: execution, Position: st.Position, Step: st.Name, Input: st.Input,
				IdempotencyKey: st.IdempotencyKey, Policy: st.Policy, Timeout: st.Timeout, StepVersion: st.StepVersion,
			}
			t.Start(p.LeaseOwner, p.LeaseTTL, now)
			s.Event = t.AttemptStarted()
			s.Task = nil
			if s.Make {
				s.Task = new(Task)
				*s.Task = t
			}
		}
	}
}

// ChildRun returns how the advance creates child run c, unowned and with
// RunStarted{Execution: 1, Workflow, Input}: pending, ready to claim; or,
// when the advance ends the parent's execution (Finish), cancelled at
// once, RunCancelled{Reason: ReasonParentFinished} following, since a
// child never outlives its parent. A run with c's id that exists already
// is left as it is.
func (p *RunAdvanceParams) ChildRun(c *ChildSpec) (RunStatus, []Event) {
	started := Event{Type: EventRunStarted, Execution: 1, Workflow: c.Workflow, Input: c.Input}
	if p.Finish == nil {
		return RunPending, []Event{started}
	}
	cancelled := ParentEnded(false)
	cancelled.Execution = 1
	return RunCancelled, []Event{started, cancelled}
}

// CancelRequests returns the events of the positions the workflow no
// longer waits for (Cancels), in their order, each position once:
// StepCancelRequested{Position, Step} for a step whose task the store
// dropped (dropped holds their names, by position), or that this advance
// scheduled and so never started (unless it ends the execution: the step
// then had no task). A cancelled timer appends nothing.
func (p *RunAdvanceParams) CancelRequests(dropped map[int]string) []Event {
	var events []Event
	for i, pos := range p.Cancels {
		if slices.Contains(p.Cancels[:i], pos) {
			continue
		}
		step, ok := dropped[pos]
		if !ok && p.Finish == nil {
			if j := slices.IndexFunc(p.Steps, func(st StepSpec) bool { return st.Position == pos }); j >= 0 {
				step, ok = p.Steps[j].Name, true
			}
		}
		if ok {
			events = append(events, Event{Type: EventStepCancelRequested, Position: pos, Step: step})
		}
	}
	return events
}

// Ended returns the event that ends a run's history as f ends it:
// RunCompleted{Output}, RunFailed{Error} or RunCancelled{Error}. (A
// continuation as new does not end it: Continued.)
func (f *RunFinish) Ended() Event {
	switch f.Status {
	case RunCompleted:
		return Event{Type: EventRunCompleted, Output: f.Output}
	case RunFailed:
		return Event{Type: EventRunFailed, Error: f.Error}
	}
	return Event{Type: EventRunCancelled, Error: f.Error}
}

// Continued returns the events of a continuation as new (ContinueAsNew)
// of a run of workflow in execution: RunContinuedAsNew{Input}, the last of
// that execution, and RunStarted{Execution: execution+1, Workflow, Input},
// the first of the next.
func (f *RunFinish) Continued(workflow string, execution int) (ended, started Event) {
	ended = Event{Type: EventRunContinuedAsNew, Execution: execution, Input: f.Input}
	started = Event{Type: EventRunStarted, Execution: execution + 1, Workflow: workflow, Input: f.Input}
	return ended, started
}

// DropsFailedSteps reports whether f drops the run's failed steps with its
// tasks and timers: a run that fails keeps them, for RunRedrive; any other
// end, or a continuation as new, drops them.
func (f *RunFinish) DropsFailedSteps() bool {
	return f.ContinueAsNew || f.Status != RunFailed
}
