package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reprise/store"
	"slices"

	"reprise/internal/eventrow"
)

// RunAdvance records a workflow's progress under the run's lease: what it
// scheduled (steps, timers, markers, children) in position order, then
// the positions it cancelled, then its end.
func (s *Store) RunAdvance(ctx context.Context, p *store.RunAdvanceParams) (*store.Advanced, error) {
	pa, err := prepareAdvance(p)
	if err != nil {
		return nil, fmt.Errorf("advance run %s: %w", p.RunID, err)
	}
	var adv *store.Advanced
	err = s.write(ctx, func(tx *txn) error {
		adv = nil
		run, err := tx.activeRun(p.RunID, p.Finish != nil)
		if err != nil {
			return err
		}
		if run.token != p.Token {
			return store.ErrLeaseLost
		}
		done, err := tx.completeAll(p.RunID, p.Completed, &run)
		if err != nil {
			return err
		}
		adv, err = tx.advance(pa, run, done, nil)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("advance run %s: %w", p.RunID, err)
	}
	return adv, nil
}

// completeAll records results handed to the workflow before the advance
// that reports them: each attempt's lease must hold, or nothing is
// written. It deletes their tasks and returns their StepCompleted events,
// for the advance to append first.
func (tx *txn) completeAll(runID string, results []store.TaskCompleteParams, run *runState) ([]store.Event, error) {
	if len(results) == 0 {
		return nil, nil
	}
	events := make([]store.Event, len(results))
	for i, c := range results {
		e := store.Event{Type: store.EventStepCompleted, Output: c.Output}
		err := tx.queryRow(`
			SELECT execution, position, step, attempt FROM tasks
			WHERE id = ? AND token = ? AND lease_until > ? AND run_id = ?`,
			c.TaskID, c.Token, tx.nanos, runID).Scan(&e.Execution, &e.Position, &e.Step, &e.Attempt)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, store.ErrLeaseLost
		}
		if err != nil {
			return nil, err
		}
		events[i] = e
	}
	// Only now, every lease checked, the writes: a stale one changes
	// nothing. (DELETE ... RETURNING, one statement, costs more than two.)
	for _, c := range results {
		if _, err := tx.exec(`DELETE FROM tasks WHERE id = ?`, c.TaskID); err != nil {
			return nil, err
		}
	}
	run.tasks -= len(results)
	return events, nil
}

// A preparedAdvance is an advance checked, and its events encoded where
// they can be, ahead of the write.
type preparedAdvance struct {
	p       *store.RunAdvanceParams
	plan    []planned
	errBlob any // the run's error, for an advance that fails it
}

func prepareAdvance(p *store.RunAdvanceParams) (*preparedAdvance, error) {
	pa := &preparedAdvance{p: p}
	if f := p.Finish; f != nil && !f.ContinueAsNew {
		if !f.Status.Final() {
			return nil, fmt.Errorf("finish with status %q", f.Status)
		}
		var err error
		if pa.errBlob, err = errorBlob(f.Error); err != nil {
			return nil, err
		}
	}
	var err error
	if pa.plan, err = planAdvance(p); err != nil {
		return nil, err
	}
	return pa, nil
}

// advance records a prepared advance of a run the caller has read and
// checked the lease of. The events of pre (with their bodies, if encoded)
// come first: they go in the same insert as the advance's own.
func (tx *txn) advance(pa *preparedAdvance, run runState, pre []store.Event, preBodies [][]byte) (*store.Advanced, error) {
	p, f, plan := pa.p, pa.p.Finish, pa.plan
	// What this advance adds, its end cleans up too.
	run.timers = run.timers || len(p.Timers) > 0
	run.children = run.children || len(p.Children) > 0
	a := &store.Advanced{Events: make([]store.Event, 0, len(pre)+len(plan)+1)}
	a.Events = append(a.Events, pre...)
	bodies := make([][]byte, len(pre), len(pre)+len(plan)+1)
	copy(bodies, preBodies)
	add := func(e store.Event, body []byte) {
		if e.Execution == 0 {
			e.Execution = run.execution
		}
		a.Events = append(a.Events, e)
		bodies = append(bodies, body)
	}

	// What the workflow scheduled, in position order. Steps of an
	// advance that finishes the run get no task: Finish would drop it.
	for _, pl := range plan {
		e := pl.event
		switch {
		case pl.step != nil && f == nil:
			task, err := tx.scheduleStep(p, pl.step, run.execution)
			if err != nil {
				return nil, err
			}
			add(e, pl.body)
			if task != nil {
				a.Tasks = append(a.Tasks, task)
				add(store.Event{
					Type: store.EventAttemptStarted, Position: task.Position, Step: task.Step, Attempt: 1,
					Worker: p.LeaseOwner, LeaseUntil: task.LeaseUntil, IdempotencyKey: task.IdempotencyKey,
				}, nil)
			}
			continue
		case pl.timer != nil:
			e.FireAt = tx.now.Add(pl.timer.Delay)
			_, err := tx.exec(`INSERT INTO timers (run_id, execution, position, fire_at) VALUES (?, ?, ?, ?)`,
				p.RunID, run.execution, pl.timer.Position, tx.nanos+int64(pl.timer.Delay))
			if err != nil {
				return nil, fmt.Errorf("schedule timer %d: %w", pl.timer.Position, err)
			}
		case pl.child != nil:
			if err := tx.createChild(p.RunID, run.execution, pl.child); err != nil {
				return nil, err
			}
		}
		add(e, pl.body)
	}

	// The positions the workflow no longer waits for.
	for _, pos := range p.Cancels {
		var step string
		err := tx.queryRow(`DELETE FROM tasks WHERE run_id = ? AND execution = ? AND position = ? RETURNING step`,
			p.RunID, run.execution, pos).Scan(&step)
		switch {
		case err == nil:
			add(store.Event{Type: store.EventStepCancelRequested, Position: pos, Step: step}, nil)
			a.Tasks = slices.DeleteFunc(a.Tasks, func(t *store.Task) bool { return t.Position == pos })
		case !errors.Is(err, sql.ErrNoRows):
			return nil, fmt.Errorf("cancel position %d: %w", pos, err)
		}
		if _, err := tx.exec(`DELETE FROM timers WHERE run_id = ? AND execution = ? AND position = ?`,
			p.RunID, run.execution, pos); err != nil {
			return nil, fmt.Errorf("cancel position %d: %w", pos, err)
		}
	}

	var parent store.Event // what the run's end tells its parent
	switch {
	case f != nil && f.ContinueAsNew:
		if err := tx.dropWork(p.RunID, run.work(true)); err != nil {
			return nil, err
		}
		if err := tx.endChildren(run, p.RunID, reasonParentFinished); err != nil {
			return nil, err
		}
		_, err := tx.exec(`UPDATE runs SET status = 'running', execution = execution + 1, input = ? WHERE id = ?`,
			blob(f.Input), p.RunID)
		if err != nil {
			return nil, err
		}
		add(store.Event{Type: store.EventRunContinuedAsNew, Input: f.Input}, nil)
		add(store.Event{
			Type: store.EventRunStarted, Execution: run.execution + 1, Workflow: run.workflow, Input: f.Input,
		}, nil)
	case f != nil:
		_, err := tx.exec(`
			UPDATE runs SET status = ?, output = ?, error = ?, owner = '', lease_until = 0
			WHERE id = ?`, string(f.Status), blob(f.Output), pa.errBlob, p.RunID)
		if err != nil {
			return nil, err
		}
		if err := tx.dropWork(p.RunID, run.work(f.Status != store.RunFailed)); err != nil {
			return nil, err
		}
		if err := tx.endChildren(run, p.RunID, reasonParentFinished); err != nil {
			return nil, err
		}
		end := store.Event{}
		switch f.Status {
		case store.RunCompleted:
			end.Type, end.Output = store.EventRunCompleted, f.Output
			parent = store.Event{Type: store.EventChildCompleted, Output: f.Output}
		case store.RunFailed:
			end.Type, end.Error = store.EventRunFailed, f.Error
			parent = store.Event{Type: store.EventChildFailed, Error: f.Error, Reason: string(f.Status)}
		case store.RunCancelled:
			end.Type, end.Error = store.EventRunCancelled, f.Error
			parent = store.Event{Type: store.EventChildFailed, Error: f.Error, Reason: string(f.Status)}
		}
		add(end, nil)
	case run.status == store.RunPending:
		if _, err := tx.exec(`UPDATE runs SET status = 'running' WHERE id = ?`, p.RunID); err != nil {
			return nil, err
		}
	}
	if err := tx.appendEvents(p.RunID, run.last, a.Events, bodies); err != nil {
		return nil, err
	}
	if parent.Type != "" && run.parentID != "" {
		var err error
		if a.Parent, err = tx.tellParent(run, p.RunID, parent); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// A planned event is one an advance appends for something the workflow
// scheduled, with what it schedules.
type planned struct {
	event store.Event
	body  []byte // encoded ahead, off the write path; nil for timers
	step  *store.StepSpec
	timer *store.TimerSpec
	child *store.ChildSpec
}

// planAdvance returns the events of what an advance schedules, in position
// order, encoded ahead where they depend on nothing the write learns.
func planAdvance(p *store.RunAdvanceParams) ([]planned, error) {
	plan := make([]planned, 0, len(p.Steps)+len(p.Timers)+len(p.Markers)+len(p.Children))
	for i := range p.Steps {
		st := &p.Steps[i]
		if st.Lease && (p.LeaseOwner == "" || p.LeaseTTL <= 0) {
			return nil, fmt.Errorf("step %d is to be leased: want LeaseOwner and LeaseTTL", st.Position)
		}
		plan = append(plan, planned{step: st, event: store.Event{
			Type: store.EventStepScheduled, Position: st.Position, Step: st.Name,
			Input: st.Input, Policy: st.PolicyText, IdempotencyKey: st.IdempotencyKey, Version: st.StepVersion,
		}})
	}
	for i := range p.Timers {
		tm := &p.Timers[i]
		plan = append(plan, planned{timer: tm, event: store.Event{
			Type: store.EventTimerScheduled, Position: tm.Position, Delay: tm.Delay,
		}})
	}
	for _, m := range p.Markers {
		plan = append(plan, planned{event: store.Event{
			Type: store.EventVersionMarker, Position: m.Position, Step: m.Name, Version: m.Version,
		}})
	}
	for i := range p.Children {
		c := &p.Children[i]
		plan = append(plan, planned{child: c, event: store.Event{
			Type: store.EventChildStarted, Position: c.Position, Child: c.ID, Workflow: c.Workflow, Input: c.Input,
		}})
	}
	// Stable: tasks get their ids in position order, so that claims of
	// tasks ready at the same time follow the workflow's order.
	if len(plan) > 1 { // the usual one needs no sort, which copies the large elements
		slices.SortStableFunc(plan, func(a, b planned) int { return cmp.Compare(a.event.Position, b.event.Position) })
	}
	for i := range plan {
		if plan[i].timer != nil {
			continue
		}
		var err error
		if plan[i].body, err = eventrow.Body(plan[i].event); err != nil {
			return nil, err
		}
	}
	return plan, nil
}

// scheduleStep makes a step a ready task, or, marked Lease, a task leased
// to p.LeaseOwner with its first attempt started, as a claim would. It
// returns the leased task, nil for a ready one.
func (tx *txn) scheduleStep(p *store.RunAdvanceParams, st *store.StepSpec, execution int) (*store.Task, error) {
	if !st.Lease {
		_, err := tx.exec(`
			INSERT INTO tasks (run_id, execution, position, step, input, idempotency_key, policy, timeout, ready_at,
				step_version)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			p.RunID, execution, st.Position, st.Name, blob(st.Input), st.IdempotencyKey, blob(st.Policy),
			int64(st.Timeout), tx.nanos, st.StepVersion)
		if err != nil {
			return nil, fmt.Errorf("schedule step %d: %w", st.Position, err)
		}
		return nil, nil
	}
	lease := p.LeaseTTL
	if st.Timeout > 0 && st.Timeout < lease {
		lease = st.Timeout
	}
	t := &store.Task{
		RunID: p.RunID, Execution: execution, Position: st.Position, Step: st.Name, Input: st.Input,
		IdempotencyKey: st.IdempotencyKey, Policy: st.Policy, Timeout: st.Timeout, Attempt: 1, Token: 1,
		Owner: p.LeaseOwner, LeaseUntil: tx.now.Add(lease), StartedAt: tx.now, FirstStartedAt: tx.now,
		StepVersion: st.StepVersion,
	}
	var err error
	t.ID, err = tx.insert(`
		INSERT INTO tasks (run_id, execution, position, step, input, idempotency_key, policy, timeout, ready_at,
			attempt, token, owner, started_at, first_started_at, lease_until, step_version)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1, 1, ?, ?, ?, ?, ?)`,
		p.RunID, execution, st.Position, st.Name, blob(st.Input), st.IdempotencyKey, blob(st.Policy),
		int64(st.Timeout), tx.nanos, p.LeaseOwner, tx.nanos, tx.nanos, t.LeaseUntil.UnixNano(), st.StepVersion)
	if err != nil {
		return nil, fmt.Errorf("schedule step %d: %w", st.Position, err)
	}
	return t, nil
}

// A runState is what a write reads of an active run: its state, lease,
// parent, and the last Seq of its history; for a run that ends, whether it
// has tasks, timers, active children and failed steps, which are then
// cleaned up.
type runState struct {
	tasks           int // the run's tasks, for a run that ends
	timers          bool
	children        bool
	failedSteps     bool
	status          store.RunStatus
	token           int64
	execution       int
	last            int64
	workflow        string
	owner           string
	parentID        string
	parentPosition  int
	parentExecution int
}

// activeRunSQL reads a run's state; activeRunEndingSQL also whether it
// has tasks, timers, active children and failed steps, in the same
// statement: a run's end then needs no statements to clean up what it does
// not have.
const (
	activeRunSQL = `
		SELECT status, token, execution, workflow, owner, coalesce(parent_id, ''), parent_position, parent_execution,
			` + lastSeq + `, 1, 1, 0, 0
		FROM runs WHERE id = ?1`
	activeRunEndingSQL = `
		SELECT status, token, execution, workflow, owner, coalesce(parent_id, ''), parent_position, parent_execution,
			` + lastSeq + `,
			(SELECT count(*) FROM tasks WHERE run_id = ?1),
			EXISTS (SELECT 1 FROM timers WHERE run_id = ?1),
			EXISTS (SELECT 1 FROM runs c WHERE c.parent_id = ?1 AND c.status IN ('pending', 'running')),
			EXISTS (SELECT 1 FROM failed_steps WHERE run_id = ?1)
		FROM runs WHERE id = ?1`
)

// activeRun reads a run that must be active: ErrNotFound when there is no
// such run, ErrRunFinished when it has finished. ending asks for what a
// run that ends must clean up.
func (tx *txn) activeRun(id string, ending bool) (runState, error) {
	var r runState
	var status string
	var timers, children, failed int
	query := activeRunSQL
	if ending {
		query = activeRunEndingSQL
	}
	err := tx.queryRow(query, id).
		Scan(&status, &r.token, &r.execution, &r.workflow, &r.owner, &r.parentID, &r.parentPosition,
			&r.parentExecution, &r.last, &r.tasks, &timers, &children, &failed)
	r.timers, r.children, r.failedSteps = timers != 0, children != 0, failed != 0
	r.status = store.RunStatus(status)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return runState{}, store.ErrNotFound
	case err != nil:
		return runState{}, err
	case r.status.Final():
		return runState{}, store.ErrRunFinished
	}
	return r, nil
}

// work says what dropWork deletes.
type work struct{ tasks, timers, failedSteps bool }

// allWork is every kind of work, for a run whose state was not read.
var allWork = work{true, true, true}

// work is what an ending run has to drop; dropFailed drops the failed
// steps kept for a redrive too (a run that fails keeps them).
func (r runState) work(dropFailed bool) work {
	return work{tasks: r.tasks > 0, timers: r.timers, failedSteps: dropFailed && r.failedSteps}
}

// dropWork deletes a run's tasks and timers, so that results of attempts
// still running find no task and are rejected and no timer fires, and with
// w.failedSteps the failed steps kept for a redrive. It skips what the run
// is known not to have.
func (tx *txn) dropWork(runID string, w work) error {
	for _, d := range []struct {
		do    bool
		query string
	}{
		{w.tasks, `DELETE FROM tasks WHERE run_id = ?`},
		{w.timers, `DELETE FROM timers WHERE run_id = ?`},
		{w.failedSteps, `DELETE FROM failed_steps WHERE run_id = ?`},
	} {
		if !d.do {
			continue
		}
		if _, err := tx.exec(d.query, runID); err != nil {
			return err
		}
	}
	return nil
}
