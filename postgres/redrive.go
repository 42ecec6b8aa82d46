package postgres

import (
	"context"
	"fmt"

	"reprise/postgres/internal/pgtx"
	"reprise/store"
)

// RunRedrive reopens a failed run as its Redrive decides: the step that
// failed gets its task back, ready now, as it was scheduled, with its
// attempt count and Base set to it, so that the policy starts afresh. The
// run is running again, without error, and unowned, for any engine to
// claim.
func (s *Store) RunRedrive(ctx context.Context, p *store.RunRedriveParams) (*store.Run, error) {
	var run *store.Run
	err := s.committer.Run(ctx, func(tx *pgtx.Tx) error {
		r, _, now, err := lockRun(ctx, tx, s.clock(), p.ID, false)
		if err != nil {
			return err
		}
		var last store.Event
		redriven, err := p.Redrive(r.status, func() (store.Event, error) {
			var err error
			last, err = lastStepEnd(ctx, tx, r.id, r.execution)
			return last, err
		})
		if err != nil {
			return err
		}
		// Its task must have been kept.
		var kept bool
		err = tx.QueryRow(ctx, `
			SELECT EXISTS (SELECT FROM reprise_step_failed WHERE run_id = $1 AND execution = $2 AND seq = $3)`,
			r.id, r.execution, last.Seq).Scan(&kept)
		if err != nil {
			return err
		}
		if !kept {
			return store.ErrNotRedrivable
		}
		a := newAppender(now)
		if err := a.add(r.runHead, redriven); err != nil {
			return err
		}
		tx.Queue(`
			WITH failed AS (
				DELETE FROM reprise_step_failed WHERE run_id = $1 AND execution = $2 AND position = $3
				RETURNING *)
			INSERT INTO reprise_task (run_id, execution, position, step, input, idempotency_key, policy, timeout,
				attempt, base, ready_at, created_at, step_version)
			SELECT run_id, execution, position, step, input, idempotency_key, policy, timeout, attempt, attempt, $4, $4,
				step_version
			FROM failed`,
			r.id, r.execution, redriven.Position, now)
		tx.Queue(`
			UPDATE reprise_run SET status = 'running', output = NULL, error = NULL, owner = '', lease_until = NULL
			WHERE id = $1`,
			r.id)
		a.queue(tx)
		tx.Notify(Notice{Kind: NoticeRunReady, RunID: r.id, Workflow: r.workflow})
		tx.Notify(Notice{Kind: NoticeTaskReady, Step: redriven.Step, At: now})
		queueRun(tx, r.id, &run)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redrive run %q: %w", p.ID, err)
	}
	return run, nil
}

// lastStepEnd returns the last StepCompleted or StepFailed of a run's
// execution, or the zero Event.
func lastStepEnd(ctx context.Context, tx *pgtx.Tx, runID string, execution int) (last store.Event, err error) {
	err = newestFirst(ctx, tx, runID, func(events []store.Event) bool {
		var ok bool
		last, ok = store.LastStepEnd(events, execution)
		return ok
	})
	return last, err
}
