package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"reprise/store"
)

// RunAdvance records a workflow's progress under the run's lease, in this
// order: the results handed to the workflow (StepCompleted), what it
// scheduled in position order (steps, timers, markers, children), the
// positions it cancelled, then its end.
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
	if err := checkAdvance(p); err != nil {
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

// checkAdvance checks what an advance asks for, before the store is
// looked at.
func checkAdvance(p *store.RunAdvanceParams) error {
	var errs []error
	if f := p.Finish; f != nil {
		if !f.ContinueAsNew && !f.Status.Final() {
			errs = append(errs, fmt.Errorf("finish with status %q: not an end state", f.Status))
		}
		errs = append(errs, checkJSON("finish", f.Output, f.Input))
	}
	for _, c := range p.Completed {
		errs = append(errs, checkJSON(fmt.Sprintf("result of task %d", c.TaskID), c.Output))
	}
	for _, st := range p.Steps {
		if st.Lease && (p.LeaseOwner == "" || p.LeaseTTL <= 0) {
			errs = append(errs, fmt.Errorf("step %d is to be leased: want LeaseOwner and LeaseTTL", st.Position))
		}
		errs = append(errs, checkJSON(fmt.Sprintf("step %d", st.Position), st.Input, st.Policy))
	}
	for _, c := range p.Children {
		if c.ID == "" || c.Workflow == "" {
			errs = append(errs, fmt.Errorf("child at position %d: id and workflow are required", c.Position))
		}
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
		t, err := s.leased(c.TaskID, c.Token, false, now)
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

// advance records a checked advance of run r; nothing in it can fail.
func (s *Store) advance(r *run, p *store.RunAdvanceParams, now time.Time) *store.Advanced {
	adv := &store.Advanced{}
	add := func(events ...store.Event) {
		adv.Events = append(adv.Events, r.appendEvents(now, events...)...)
	}

	// The results handed to the workflow, as TaskComplete records them.
	for _, c := range p.Completed {
		t := s.tasks[c.TaskID]
		add(store.Event{
			Type: store.EventStepCompleted, Execution: t.Execution, Position: t.Position, Step: t.Step,
			Attempt: t.Attempt, Output: c.Output,
		})
	}
	for _, c := range p.Completed {
		delete(s.tasks, c.TaskID)
	}

	// What the workflow scheduled, in position order. An execution that
	// ends in the same advance records its steps and timers but starts
	// none of them; its children are started, and cancelled with it.
	starts := p.Finish == nil
	var leased []*task
	for _, it := range plan(p) {
		switch {
		case it.step != nil:
			st := it.step
			add(store.Event{
				Type: store.EventStepScheduled, Position: st.Position, Step: st.Name, Input: st.Input,
				Policy: st.PolicyText, IdempotencyKey: st.IdempotencyKey, Version: st.StepVersion,
			})
			if !starts {
				continue
			}
			t := s.schedule(r, st, now)
			if st.Lease { // as TaskClaim would lease it
				add(t.start(p.LeaseOwner, p.LeaseTTL, now))
				leased = append(leased, t)
			}
		case it.timer != nil:
			tm := it.timer
			fireAt := now.Add(tm.Delay)
			if starts {
				s.lastTimerID++
				s.timers[s.lastTimerID] = &timer{
					id: s.lastTimerID, at: position{r.ID, r.Execution, tm.Position}, fireAt: fireAt,
				}
			}
			add(store.Event{Type: store.EventTimerScheduled, Position: tm.Position, Delay: tm.Delay, FireAt: fireAt})
		case it.marker != nil:
			m := it.marker
			add(store.Event{Type: store.EventVersionMarker, Position: m.Position, Change: m.Name, Version: m.Version})
		case it.child != nil:
			c := it.child
			s.createChild(r, c, now)
			add(store.Event{
				Type: store.EventChildStarted, Position: c.Position, Child: c.ID, Workflow: c.Workflow, Input: c.Input,
			})
		}
	}

	// The positions the workflow no longer waits for: their tasks and
	// timers go, and a step that had a task says so.
	for _, pos := range p.Cancels {
		at := position{r.ID, r.Execution, pos}
		for id, t := range s.tasks {
			if t.at() == at {
				delete(s.tasks, id)
				add(store.Event{Type: store.EventStepCancelRequested, Position: pos, Step: t.Step})
			}
		}
		for id, tm := range s.timers {
			if tm.at == at {
				delete(s.timers, id)
			}
		}
	}

	// The end of the run, or of its execution.
	switch f := p.Finish; {
	case f == nil:
		r.Status = store.RunRunning // a pending run that its holder advances
	case f.ContinueAsNew:
		s.dropWork(r.ID, true)
		s.cancelChildren(r.ID, now, reasonParentFinished)
		add(store.Event{Type: store.EventRunContinuedAsNew, Input: f.Input})
		f.Apply(&r.Run)
		r.Status, r.Input = store.RunRunning, cloneJSON(r.Input)
		add(store.Event{Type: store.EventRunStarted, Workflow: r.Workflow, Input: f.Input})
	default:
		f.Apply(&r.Run)
		r.Output, r.Error = cloneJSON(r.Output), cloneError(r.Error)
		r.owner, r.leaseUntil = "", time.Time{}
		s.dropWork(r.ID, f.Status != store.RunFailed) // a failed run keeps its failed steps, for a redrive
		s.cancelChildren(r.ID, now, reasonParentFinished)
		end, told := ends(f)
		add(end)
		if r.ParentID != "" {
			adv.Parent = s.tellParent(r, told, now)
		}
	}

	for _, t := range leased {
		if s.tasks[t.ID] != nil { // not cancelled at once
			adv.Tasks = append(adv.Tasks, t.out())
		}
	}
	return adv
}

// An item is one thing an advance scheduled.
type item struct {
	position int
	step     *store.StepSpec
	timer    *store.TimerSpec
	marker   *store.MarkerSpec
	child    *store.ChildSpec
}

// plan returns what an advance scheduled in position order; of one
// position, steps come first, then timers, markers and children. Tasks
// so take their ids in position order, and tasks ready at the same time
// are claimed in the workflow's order.
func plan(p *store.RunAdvanceParams) []item {
	var items []item
	for i := range p.Steps {
		items = append(items, item{position: p.Steps[i].Position, step: &p.Steps[i]})
	}
	for i := range p.Timers {
		items = append(items, item{position: p.Timers[i].Position, timer: &p.Timers[i]})
	}
	for i := range p.Markers {
		items = append(items, item{position: p.Markers[i].Position, marker: &p.Markers[i]})
	}
	for i := range p.Children {
		items = append(items, item{position: p.Children[i].Position, child: &p.Children[i]})
	}
	slices.SortStableFunc(items, func(a, b item) int { return cmp.Compare(a.position, b.position) })
	return items
}

// ends returns the event that ends a run as f says, and the one that
// tells its parent.
func ends(f *store.RunFinish) (end, told store.Event) {
	switch f.Status {
	case store.RunCompleted:
		return store.Event{Type: store.EventRunCompleted, Output: f.Output},
			store.Event{Type: store.EventChildCompleted, Output: f.Output}
	case store.RunFailed:
		return store.Event{Type: store.EventRunFailed, Error: f.Error},
			store.Event{Type: store.EventChildFailed, Error: f.Error, ChildStatus: f.Status}
	}
	return store.Event{Type: store.EventRunCancelled, Error: f.Error},
		store.Event{Type: store.EventChildFailed, Error: f.Error, ChildStatus: f.Status}
}
