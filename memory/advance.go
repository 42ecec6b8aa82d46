package memory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"reprise/store"
)

// RunAdvance records a workflow's progress under the run's lease, as the
// advance's rules decide (RunAdvanceParams): the results handed to the
// workflow, what it scheduled (Plan), the positions it cancelled
// (CancelRequests), then its end (RunFinish).
//
// A finished run gives ErrRunFinished whatever the token, so that a stale
// holder learns the run is over; then a token other than the run's gives
// ErrLeaseLost. Only the token is checked, not the lease's time: a claim
// takes a new token, and until one does the holder of a lapsed lease may
// still advance.
func (s *Store) RunAdvance(ctx context.Context, p *store.RunAdvanceParams) (*store.Advanced, error) {
	adv, err := s.runAdvance(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("advance run %s: %w", p.RunID, err)
	}
	return adv, nil
}

func (s *Store) runAdvance(ctx context.Context, p *store.RunAdvanceParams) (*store.Advanced, error) {
	if err := errors.Join(p.Check(), checkAdvanceJSON(p)); err != nil {
		return nil, err
	}
	now, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	r := s.runs[p.RunID]
	switch {
	case r == nil:
		return nil, store.ErrNotFound
	case r.Status.Final():
		return nil, store.ErrRunFinished
	case r.token != p.Token:
		return nil, store.ErrLeaseLost
	}
	if err := s.checkAdvanceOf(r, p, now); err != nil {
		return nil, err
	}
	return s.advance(r, p, now), nil
}

// checkAdvanceJSON checks the documents of an advance (checkJSON).
func checkAdvanceJSON(p *store.RunAdvanceParams) error {
	var errs []error
	if f := p.Finish; f != nil {
		errs = append(errs, checkJSON("finish", f.Output, f.Input))
	}
	for _, c := range p.Completed {
		errs = append(errs, checkJSON(fmt.Sprintf("result of task %d", c.TaskID), c.Output))
	}
	for _, st := range p.Steps {
		errs = append(errs, checkJSON(fmt.Sprintf("step %d", st.Position), st.Input, st.Policy))
	}
	for _, c := range p.Children {
		errs = append(errs, checkJSON(fmt.Sprintf("child at position %d", c.Position), c.Input))
	}
	return errors.Join(errs...)
}

// checkAdvanceOf checks an advance against the run's state, before
// anything is written: every handed result's lease must hold at now and
// its task be the run's (ErrLeaseLost otherwise), and no step or timer
// may take a position of the execution that has one already (the stores
// on a database have a unique index of each).
func (s *Store) checkAdvanceOf(r *run, p *store.RunAdvanceParams, now time.Time) error {
	handed := make(map[int64]bool)
	for _, c := range p.Completed {
		t, err := s.leased(c.TaskID, c.Token, c.Attempt, false, now)
		if err != nil || t.RunID != r.ID {
			return store.ErrLeaseLost
		}
		handed[t.ID] = true
	}
	if p.Finish != nil {
		return nil // an execution that ends starts no task and no timer
	}
	steps, timers := make(map[int]bool), make(map[int]bool)
	for _, t := range s.tasks {
		if t.RunID == r.ID && t.Execution == r.Execution && !handed[t.ID] {
			steps[t.Position] = true
		}
	}
	for _, tm := range s.timers {
		if tm.at.runID == r.ID && tm.at.execution == r.Execution {
			timers[tm.at.position] = true
		}
	}
	for _, st := range p.Steps {
		if steps[st.Position] {
			return fmt.Errorf("step %d: its position has a task already", st.Position)
		}
		steps[st.Position] = true
	}
	for _, tm := range p.Timers {
		if timers[tm.Position] {
			return fmt.Errorf("timer %d: its position has a timer already", tm.Position)
		}
		timers[tm.Position] = true
	}
	return nil
}

// advance records a checked advance of run r, as its rules decide;
// nothing in it can fail.
func (s *Store) advance(r *run, p *store.RunAdvanceParams, now time.Time) *store.Advanced {
	adv := &store.Advanced{}
	add := func(events ...store.Event) {
		adv.Events = append(adv.Events, r.appendEvents(now, events...)...)
	}

	// The results handed to the workflow, as TaskComplete records them.
	for _, c := range p.Completed {
		add(c.Completed(&s.tasks[c.TaskID].Task))
	}
	for _, c := range p.Completed {
		delete(s.tasks, c.TaskID)
	}

	// What the workflow scheduled, in position order, and what the plan
	// says to make for it.
	plan := p.Plan()
	p.Stamp(plan, r.Execution, store.Now{At: now})
	for i := range plan {
		sc := &plan[i]
		switch {
		case sc.Child != nil:
			s.createChild(r, p, sc.Child, now)
		case !sc.Make:
		case sc.Task != nil:
			t := s.addTask(sc.Task, now)
			adv.Tasks = append(adv.Tasks, t.out())
		case sc.Step != nil:
			st := sc.Step
			s.addTask(&store.Task{
				RunID: r.ID, Execution: r.Execution, Position: st.Position, Step: st.Name, Input: st.Input,
				IdempotencyKey: st.IdempotencyKey, Policy: st.Policy, Timeout: st.Timeout, StepVersion: st.StepVersion,
			}, now)
		case sc.Timer != nil:
			s.lastTimerID++
			s.timers[s.lastTimerID] = &timer{
				id: s.lastTimerID, at: position{r.ID, r.Execution, sc.Timer.Position}, fireAt: sc.Event.FireAt,
			}
		}
		add(sc.Event)
	}

	// The positions the workflow no longer waits for: their tasks and
	// timers, if they had any, are dropped.
	var dropped map[int]string
	for _, pos := range p.Cancels {
		at := position{r.ID, r.Execution, pos}
		for id, t := range s.tasks {
			if t.at() == at {
				if dropped == nil {
					dropped = make(map[int]string)
				}
				dropped[pos] = t.Step
				delete(s.tasks, id)
			}
		}
		for id, tm := range s.timers {
			if tm.at == at {
				delete(s.timers, id)
			}
		}
	}
	add(p.CancelRequests(dropped)...)

	// The end of the run, or of its execution.
	switch f := p.Finish; {
	case f == nil:
		r.Status = store.RunRunning // a pending run that its holder advances
	case f.ContinueAsNew:
		s.dropWork(r.ID, f.DropsFailedSteps())
		adv.Descendants = s.cancelChildren(r.ID, now, false)
		ended, started := f.Continued(r.Workflow, r.Execution)
		f.Apply(&r.Run)
		r.Status, r.Input = store.RunRunning, cloneJSON(r.Input)
		add(ended, started)
	default:
		f.Apply(&r.Run)
		r.Output, r.Error = cloneJSON(r.Output), cloneError(r.Error)
		r.owner, r.leaseUntil = "", time.Time{}
		s.dropWork(r.ID, f.DropsFailedSteps())
		adv.Descendants = s.cancelChildren(r.ID, now, false)
		add(f.Ended())
		if r.ParentID != "" {
			adv.Parent = s.tellParent(r, store.ChildEnded(r.ID, r.parentPosition, f.Status, f.Output, f.Error), now)
		}
	}
	return adv
}
