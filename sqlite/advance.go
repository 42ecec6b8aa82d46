package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"reprise/internal/eventrow"
	"reprise/store"
)

// RunAdvance records a workflow's progress under the run's lease: what it
// scheduled (steps, timers, markers, children) in position order, then
// the positions it cancelled, then its end.
func (s *Store) RunAdvance(ctx context.Context, p *store.RunAdvanceParams) (*store.Advanced, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("advance run %s: %w", p.RunID, err)
	}
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
	for i := range results {
		c := &results[i]
		var t store.Task
		err := tx.queryRow(`
			SELECT execution, position, step, attempt FROM tasks
			WHERE id = ? AND token = ? AND lease_until > ? AND run_id = ?`,
			c.TaskID, c.Token, tx.nanos, runID).Scan(&t.Execution, &t.Position, &t.Step, &t.Attempt)
		if errors.Is(err, sql.ErrNoRows) || err == nil && store.Ended(c.Attempt, t.Attempt) {
			return nil, store.ErrLeaseLost
		}
		if err != nil {
			return nil, err
		}
		events[i] = c.Completed(&t)
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

// A preparedAdvance is an advance checked and planned, and its events
// encoded where they can be, ahead of the write.
type preparedAdvance struct {
	p       *store.RunAdvanceParams
	plan    []store.Scheduled
	bodies  [][]byte // of plan's events, nil for those Stamp sets
	errBlob any      // the run's error, for an advance that fails it

	bodies0 [2][]byte // room for the usual plan, a step leased or not
}

// prepareAdvance prepares an advance checked by its Check.
func prepareAdvance(p *store.RunAdvanceParams) (*preparedAdvance, error) {
	pa := &preparedAdvance{p: p, plan: p.Plan()}
	if f := p.Finish; f != nil && !f.ContinueAsNew {
		var err error
		if pa.errBlob, err = errorBlob(f.Error); err != nil {
			return nil, err
		}
	}
	pa.bodies = pa.bodies0[:0]
	if len(pa.plan) > len(pa.bodies0) {
		pa.bodies = make([][]byte, 0, len(pa.plan))
	}
	pa.bodies = pa.bodies[:len(pa.plan)]
	for i := range pa.plan {
		if pa.plan[i].Timed() {
			continue
		}
		var err error
		if pa.bodies[i], err = eventrow.Body(pa.plan[i].Event); err != nil {
			return nil, err
		}
	}
	return pa, nil
}

// advance records a prepared advance of a run the caller has read and
// checked the lease of. The events of pre (with their bodies, if encoded)
// come first: they go in the same insert as the advance's own.
func (tx *txn) advance(pa *preparedAdvance, run runState, pre []store.Event, preBodies [][]byte) (*store.Advanced, error) {
	p, f, plan := pa.p, pa.p.Finish, pa.plan
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

	// What the workflow scheduled, in position order.
	p.Stamp(plan, run.execution, store.Now{At: tx.now})
	for i := range plan {
		s := &plan[i]
		switch {
		case s.Child != nil:
			if err := tx.createChild(p, run.execution, s.Child); err != nil {
				return nil, err
			}
		case !s.Make:
		case s.Task != nil:
			if err := tx.insertLeased(s.Task); err != nil {
				return nil, err
			}
			a.Tasks = append(a.Tasks, s.Task)
		case s.Step != nil:
			st := s.Step
			_, err := tx.exec(`
				INSERT INTO tasks (run_id, execution, position, step, input, idempotency_key, policy, timeout,
					ready_at, step_version)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				p.RunID, run.execution, st.Position, st.Name, blob(st.Input), st.IdempotencyKey, blob(st.Policy),
				int64(st.Timeout), tx.nanos, st.StepVersion)
			if err != nil {
				return nil, fmt.Errorf("schedule step %d: %w", st.Position, err)
			}
		case s.Timer != nil:
			_, err := tx.exec(`INSERT INTO timers (run_id, execution, position, fire_at) VALUES (?, ?, ?, ?)`,
				p.RunID, run.execution, s.Timer.Position, toNanos(s.Event.FireAt))
			if err != nil {
				return nil, fmt.Errorf("schedule timer %d: %w", s.Timer.Position, err)
			}
		}
		add(s.Event, pa.bodies[i])
	}

	// The positions the workflow no longer waits for: their tasks and
	// timers, if they had any, are dropped.
	var dropped map[int]string
	for _, pos := range p.Cancels {
		var step string
		err := tx.queryRow(`DELETE FROM tasks WHERE run_id = ? AND execution = ? AND position = ? RETURNING step`,
			p.RunID, run.execution, pos).Scan(&step)
		switch {
		case err == nil:
			if dropped == nil {
				dropped = map[int]string{}
			}
			dropped[pos] = step
		case !errors.Is(err, sql.ErrNoRows):
			return nil, fmt.Errorf("cancel position %d: %w", pos, err)
		}
		if _, err := tx.exec(`DELETE FROM timers WHERE run_id = ? AND execution = ? AND position = ?`,
			p.RunID, run.execution, pos); err != nil {
			return nil, fmt.Errorf("cancel position %d: %w", pos, err)
		}
	}
	for _, e := range p.CancelRequests(dropped) {
		add(e, nil)
	}

	var parent store.Event // what the run's end tells its parent
	switch {
	case f != nil && f.ContinueAsNew:
		if err := tx.dropWork(p.RunID, run.work(f.DropsFailedSteps())); err != nil {
			return nil, err
		}
		var err error
		if a.Descendants, err = tx.endChildren(run, p.RunID); err != nil {
			return nil, err
		}
		_, err = tx.exec(`UPDATE runs SET status = 'running', execution = execution + 1, input = ? WHERE id = ?`,
			blob(f.Input), p.RunID)
		if err != nil {
			return nil, err
		}
		ended, started := f.Continued(run.workflow, run.execution)
		add(ended, nil)
		add(started, nil)
	case f != nil:
		_, err := tx.exec(`
			UPDATE runs SET status = ?, output = ?, error = ?, owner = ''
			WHERE id = ?`, string(f.Status), blob(f.Output), pa.errBlob, p.RunID)
		if err != nil {
			return nil, err
		}
		if err := tx.dropWork(p.RunID, run.work(f.DropsFailedSteps())); err != nil {
			return nil, err
		}
		if a.Descendants, err = tx.endChildren(run, p.RunID); err != nil {
			return nil, err
		}
		add(f.Ended(), nil)
		parent = store.ChildEnded(p.RunID, run.parentPosition, f.Status, f.Output, f.Error)
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
		if a.Parent, err = tx.tellParent(run, parent); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// insertLeased inserts a task leased as it is scheduled (Stamp), and sets
// its id.
func (tx *txn) insertLeased(t *store.Task) error {
	var err error
	t.ID, err = tx.insert(`
		INSERT INTO tasks (run_id, execution, position, step, input, idempotency_key, policy, timeout, ready_at,
			attempt, token, owner, started_at, first_started_at, lease_until, step_version)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		t.RunID, t.Execution, t.Position, t.Step, blob(t.Input), t.IdempotencyKey, blob(t.Policy),
		int64(t.Timeout), t.StartedAt.UnixNano(), t.Attempt, t.Token, t.Owner, t.StartedAt.UnixNano(),
		t.FirstStartedAt.UnixNano(), t.LeaseUntil.UnixNano(), t.StepVersion)
	if err != nil {
		return fmt.Errorf("schedule step %d: %w", t.Position, err)
	}
	return nil
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
