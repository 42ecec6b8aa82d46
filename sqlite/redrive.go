package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"reprise/internal/eventrow"
	"reprise/store"
)

// RunRedrive reopens a failed run as its Redrive decides: the step's task,
// kept in failed_steps when it failed, is ready again with a fresh budget
// (Base = the attempts made).
func (s *Store) RunRedrive(ctx context.Context, p *store.RunRedriveParams) (*store.Run, error) {
	var run *store.Run
	err := s.write(ctx, func(tx *txn) error {
		var status string
		var execution int
		var last int64
		err := tx.queryRow(`SELECT status, execution, `+lastSeq+` FROM runs WHERE id = ?1`, p.ID).
			Scan(&status, &execution, &last)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		redriven, err := p.Redrive(store.RunStatus(status), func() (store.Event, error) {
			return lastStepEnd(tx, p.ID, execution)
		})
		if err != nil {
			return err
		}
		n, err := tx.exec(`
			INSERT INTO tasks (run_id, execution, position, step, input, idempotency_key, policy, timeout,
				attempt, base, ready_at, step_version)
			SELECT run_id, execution, position, step, input, idempotency_key, policy, timeout, attempt, attempt, ?,
				step_version
			FROM failed_steps WHERE run_id = ? AND execution = ? AND position = ?`,
			tx.nanos, p.ID, execution, redriven.Position)
		if err != nil {
			return err
		}
		if n == 0 {
			// The step failed before the store kept failed steps.
			return store.ErrNotRedrivable
		}
		_, err = tx.exec(`DELETE FROM failed_steps WHERE run_id = ? AND execution = ? AND position = ?`,
			p.ID, execution, redriven.Position)
		if err != nil {
			return err
		}
		_, err = tx.exec(`
			UPDATE runs SET status = 'running', output = NULL, error = NULL, owner = ''
			WHERE id = ?`, p.ID)
		if err != nil {
			return err
		}
		redriven.Execution = execution
		if err := tx.appendEvents(p.ID, last, []store.Event{redriven}, nil); err != nil {
			return err
		}
		run, err = getRun(tx, p.ID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("redrive run %s: %w", p.ID, err)
	}
	return run, nil
}

// SignalSend appends SignalReceived to an active run's current execution.
func (s *Store) SignalSend(ctx context.Context, p *store.SignalSendParams) (*store.Outcome, error) {
	received := p.Received()
	body, err := eventrow.Body(received)
	if err != nil {
		return nil, fmt.Errorf("signal run %s: %w", p.RunID, err)
	}
	var out *store.Outcome
	err = s.write(ctx, func(tx *txn) error {
		r, err := tx.activeRun(p.RunID, false)
		if err != nil {
			return err
		}
		received.Execution = r.execution
		events := []store.Event{received}
		if err := tx.appendEvents(p.RunID, r.last, events, [][]byte{body}); err != nil {
			return err
		}
		out = &store.Outcome{RunID: p.RunID, Owner: r.owner, Events: events}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("signal run %s: %w", p.RunID, err)
	}
	return out, nil
}

// lastStepEnd returns the last StepCompleted or StepFailed event of the
// run's execution, or a zero Event. It reads the history backwards, a row
// at a time.
func lastStepEnd(tx *txn, runID string, execution int) (store.Event, error) {
	rows, err := tx.query(`SELECT seq, execution, at, body FROM events WHERE run_id = ? ORDER BY seq DESC`, runID)
	if err != nil {
		return store.Event{}, err
	}
	defer rows.Close()
	var events []store.Event
	for rows.Next() {
		if events, err = scanEvents(rows, events[:0], 0); err != nil {
			return store.Event{}, err
		}
		if e, ok := store.LastStepEnd(events, execution); ok {
			return e, nil
		}
	}
	return store.Event{}, rows.Err()
}
