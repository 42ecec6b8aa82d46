package memory

import (
	"slices"
	"strings"
	"time"

	"reprise/store"
)

// createChild creates child run c of the advance p of run parent, unowned,
// as the advance's ChildRun says, with its first events in its own
// history. A run with the id that exists already is left as it is.
func (s *Store) createChild(parent *run, p *store.RunAdvanceParams, c *store.ChildSpec, now time.Time) {
	if s.runs[c.ID] != nil {
		return
	}
	status, events := p.ChildRun(c)
	r := &run{
		Run: store.Run{
			ID: c.ID, Workflow: c.Workflow, Status: status, Input: cloneJSON(c.Input),
			Execution: 1, ParentID: parent.ID, CreatedAt: now, TraceParent: c.TraceParent,
		},
		parentPosition: c.Position, parentExecution: parent.Execution,
	}
	s.runs[r.ID] = r
	r.appendEvents(now, events...)
}

// cancelRun cancels an active run: appends cancelled, its RunCancelled,
// drops its work (failed steps too) and cancels its active children, and
// theirs, which it returns. It tells no parent: the caller does, when it
// should.
func (s *Store) cancelRun(r *run, now time.Time, cancelled store.Event) []*store.Run {
	r.Status = store.RunCancelled
	r.owner, r.leaseUntil = "", time.Time{}
	r.appendEvents(now, cancelled)
	s.dropWork(r.ID, true)
	return s.cancelChildren(r.ID, now, true)
}

// cancelChildren cancels the active children of a run that ends, in id
// order, and theirs; cancelled says that the run was cancelled
// (ParentEnded). It returns the runs it cancelled.
func (s *Store) cancelChildren(parentID string, now time.Time, cancelled bool) []*store.Run {
	var children []*run
	for _, r := range s.runs {
		if r.ParentID == parentID && !r.Status.Final() {
			children = append(children, r)
		}
	}
	slices.SortFunc(children, func(a, b *run) int { return strings.Compare(a.ID, b.ID) })
	var ended []*store.Run
	for _, c := range children {
		below := s.cancelRun(c, now, store.ParentEnded(cancelled))
		ended = append(append(ended, c.out()), below...)
	}
	return ended
}

// tellParent appends e, the end of a child run (ChildEnded), to the
// parent, if the parent still waits for it (ParentWaits). It returns what
// it appended, with the parent's owner to tell, or nil.
func (s *Store) tellParent(child *run, e store.Event, now time.Time) *store.Outcome {
	parent := s.runs[child.ParentID]
	if parent == nil || !store.ParentWaits(parent.Status, parent.Execution, child.parentExecution) {
		return nil
	}
	events := parent.appendEvents(now, e)
	return &store.Outcome{RunID: parent.ID, Owner: parent.owner, Events: events}
}

// dropWork deletes a run's tasks and timers, so that results of attempts
// still running find no task and are rejected and no timer fires; with
// failedSteps, the failed steps kept for a redrive too.
func (s *Store) dropWork(runID string, failedSteps bool) {
	for id, t := range s.tasks {
		if t.RunID == runID {
			delete(s.tasks, id)
		}
	}
	for id, tm := range s.timers {
		if tm.at.runID == runID {
			delete(s.timers, id)
		}
	}
	if failedSteps {
		for at := range s.failed {
			if at.runID == runID {
				delete(s.failed, at)
			}
		}
	}
}
