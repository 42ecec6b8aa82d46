package memory

import (
	"slices"
	"strings"
	"time"

	"reprise/store"
)

// The reasons in RunCancelled of a child whose parent ended.
const (
	reasonParentFinished  = "parent finished"
	reasonParentCancelled = "parent cancelled"
)

// createChild creates a child run of the parent's current execution,
// unowned and pending, with RunStarted in its own history. A run with the
// id that exists already is left as it is.
func (s *Store) createChild(parent *run, c *store.ChildSpec, now time.Time) {
	if s.runs[c.ID] != nil {
		return
	}
	r := &run{
		Run: store.Run{
			ID: c.ID, Workflow: c.Workflow, Status: store.RunPending, Input: cloneJSON(c.Input),
			Execution: 1, ParentID: parent.ID, CreatedAt: now,
		},
		parentPosition: c.Position, parentExecution: parent.Execution,
	}
	s.runs[r.ID] = r
	r.appendEvents(now, store.Event{Type: store.EventRunStarted, Workflow: c.Workflow, Input: c.Input})
}

// cancelRun cancels an active run: appends RunCancelled{Reason}, drops
// its work (failed steps too) and cancels its active children, and
// theirs, with reason "parent cancelled". It tells no parent: the caller
// does, when it should.
func (s *Store) cancelRun(r *run, now time.Time, reason string) {
	r.Status = store.RunCancelled
	r.owner, r.leaseUntil = "", time.Time{}
	r.appendEvents(now, store.Event{Type: store.EventRunCancelled, Reason: reason})
	s.dropWork(r.ID, true)
	s.cancelChildren(r.ID, now, reasonParentCancelled)
}

// cancelChildren cancels the active children of a run whose execution
// ends, in id order.
func (s *Store) cancelChildren(parentID string, now time.Time, reason string) {
	var children []*run
	for _, r := range s.runs {
		if r.ParentID == parentID && !r.Status.Final() {
			children = append(children, r)
		}
	}
	slices.SortFunc(children, func(a, b *run) int { return strings.Compare(a.ID, b.ID) })
	for _, c := range children {
		s.cancelRun(c, now, reason)
	}
}

// tellParent appends e (ChildCompleted or ChildFailed) to the parent of a
// child run that ended, if the parent is active and still in the
// execution that started the child. It returns what it appended, with the
// parent's owner to tell, or nil.
func (s *Store) tellParent(child *run, e store.Event, now time.Time) *store.Outcome {
	parent := s.runs[child.ParentID]
	if parent == nil || parent.Status.Final() || parent.Execution != child.parentExecution {
		return nil
	}
	e.Position, e.Child = child.parentPosition, child.ID
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
