package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"reprise"
)

// runColumns are the columns scanRun reads. A run's updated time is its
// last event's.
const runColumns = `id, workflow, status, execution, input, output, error, created_at,
	(SELECT at FROM events WHERE run_id = runs.id ORDER BY seq DESC LIMIT 1)`

type scanner interface{ Scan(dest ...any) error }

func scanRun(row scanner) (*reprise.Run, error) {
	var r reprise.Run
	var status string
	var input, output, errJSON []byte
	var created int64
	var updated sql.NullInt64
	err := row.Scan(&r.ID, &r.Workflow, &status, &r.Execution, &input, &output, &errJSON, &created, &updated)
	if err != nil {
		return nil, err
	}
	r.Status, r.Input, r.Output = reprise.RunStatus(status), input, output
	if errJSON != nil {
		r.Error = &reprise.ErrorInfo{}
		if err := json.Unmarshal(errJSON, r.Error); err != nil {
			return nil, fmt.Errorf("decode error of run %s: %w", r.ID, err)
		}
	}
	r.CreatedAt = fromNanos(created)
	r.UpdatedAt = fromNanos(updated.Int64)
	return &r, nil
}

func getRun(tx *txn, id string) (*reprise.Run, error) {
	run, err := scanRun(tx.queryRow(`SELECT `+runColumns+` FROM runs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, reprise.ErrNotFound
	}
	return run, err
}

// RunCreate creates a run, or returns the existing one with the id.
func (s *Store) RunCreate(ctx context.Context, p *reprise.RunCreateParams) (reprise.RunLease, bool, error) {
	startedBody, err := encodeEvents([]reprise.Event{{Type: reprise.EventRunStarted, Workflow: p.Workflow, Input: p.Input}})
	if err != nil {
		return reprise.RunLease{}, false, fmt.Errorf("create run %s: %w", p.ID, err)
	}
	var lease reprise.RunLease
	var created bool
	err = s.write(ctx, func(tx *txn) error {
		lease, created = reprise.RunLease{}, false
		var until, token int64
		if p.Owner != "" {
			until, token = tx.nanos+int64(p.LeaseTTL), 1
		}
		n, err := tx.exec(`
			INSERT INTO runs (id, workflow, status, input, owner, lease_until, token, created_at)
			VALUES (?, ?, 'pending', ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO NOTHING`,
			p.ID, p.Workflow, blob(p.Input), p.Owner, until, token, tx.nanos)
		if err != nil {
			return err
		}
		if n == 0 {
			lease.Run, err = getRun(tx, p.ID)
			return err
		}
		started := []reprise.Event{{Type: reprise.EventRunStarted, Execution: 1, Workflow: p.Workflow, Input: p.Input}}
		if err := tx.appendEvents(p.ID, 0, started, startedBody); err != nil {
			return err
		}
		lease = reprise.RunLease{Token: token, Run: &reprise.Run{
			ID: p.ID, Workflow: p.Workflow, Status: reprise.RunPending, Input: p.Input,
			Execution: 1, CreatedAt: tx.now, UpdatedAt: tx.now,
		}}
		created = true
		return nil
	})
	if err != nil {
		return reprise.RunLease{}, false, fmt.Errorf("create run %s: %w", p.ID, err)
	}
	return lease, created, nil
}

// RunGet returns a run.
func (s *Store) RunGet(ctx context.Context, id string) (*reprise.Run, error) {
	var run *reprise.Run
	err := s.read(ctx, func(tx *txn) (err error) {
		run, err = getRun(tx, id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get run %s: %w", id, err)
	}
	return run, nil
}

// RunList lists runs, newest first.
func (s *Store) RunList(ctx context.Context, p *reprise.RunListParams) ([]*reprise.Run, error) {
	var where []string
	var args []any
	if p.Status != "" {
		where, args = append(where, "status = ?"), append(args, string(p.Status))
	}
	if p.Workflow != "" {
		where, args = append(where, "workflow = ?"), append(args, p.Workflow)
	}
	if p.Before != "" {
		where = append(where, "(created_at, id) < (SELECT created_at, id FROM runs WHERE id = ?)")
		args = append(args, p.Before)
	}
	query := `SELECT ` + runColumns + ` FROM runs`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	query += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	args = append(args, cmp.Or(p.Limit, 100))

	var runs []*reprise.Run
	err := s.read(ctx, func(tx *txn) error {
		runs = runs[:0]
		rows, err := tx.query(query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			run, err := scanRun(rows)
			if err != nil {
				return err
			}
			runs = append(runs, run)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	return runs, nil
}

// RunClaim leases active runs whose lease is free or has lapsed, oldest
// first, each with a new token.
func (s *Store) RunClaim(ctx context.Context, p *reprise.RunClaimParams) ([]reprise.RunLease, error) {
	filter := ""
	if p.Workflows != nil {
		filter = "AND workflow IN (" + placeholders(len(p.Workflows)) + ")"
	}
	query := `
		UPDATE runs SET owner = ?, lease_until = ?, token = token + 1
		WHERE id IN (
			SELECT id FROM runs
			WHERE status IN ('pending', 'running') AND lease_until <= ? ` + filter + `
			ORDER BY created_at, id LIMIT ?)
		RETURNING id, token`
	var leases []reprise.RunLease
	err := s.write(ctx, func(tx *txn) error {
		leases = leases[:0]
		args := []any{p.Owner, tx.nanos + int64(p.LeaseTTL), tx.nanos}
		for _, w := range p.Workflows {
			args = append(args, w)
		}
		args = append(args, p.Limit)
		rows, err := tx.query(query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var l reprise.RunLease
			l.Run = &reprise.Run{}
			if err := rows.Scan(&l.Run.ID, &l.Token); err != nil {
				return err
			}
			leases = append(leases, l)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for i := range leases {
			if leases[i].Run, err = getRun(tx, leases[i].Run.ID); err != nil {
				return err
			}
		}
		slices.SortFunc(leases, func(a, b reprise.RunLease) int {
			return cmp.Or(a.Run.CreatedAt.Compare(b.Run.CreatedAt), strings.Compare(a.Run.ID, b.Run.ID))
		})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim runs: %w", err)
	}
	return leases, nil
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// RunRenew sets the owner's run leases to lapse LeaseTTL from now, or
// releases them when LeaseTTL is zero.
func (s *Store) RunRenew(ctx context.Context, p *reprise.RunRenewParams) error {
	err := s.write(ctx, func(tx *txn) error {
		if p.LeaseTTL <= 0 {
			_, err := tx.exec(`
				UPDATE runs SET owner = '', lease_until = 0
				WHERE owner = ? AND status IN ('pending', 'running')`, p.Owner)
			return err
		}
		_, err := tx.exec(`
			UPDATE runs SET lease_until = ?
			WHERE owner = ? AND status IN ('pending', 'running')`, tx.nanos+int64(p.LeaseTTL), p.Owner)
		return err
	})
	if err != nil {
		return fmt.Errorf("renew runs of %s: %w", p.Owner, err)
	}
	return nil
}

// RunAdvance records a workflow's progress under the run's lease.
func (s *Store) RunAdvance(ctx context.Context, p *reprise.RunAdvanceParams) ([]reprise.Event, error) {
	var errBlob any
	if p.Finish != nil {
		if !p.Finish.Status.Final() {
			return nil, fmt.Errorf("advance run %s: finish with status %q", p.RunID, p.Finish.Status)
		}
		var err error
		if errBlob, err = errorBlob(p.Finish.Error); err != nil {
			return nil, fmt.Errorf("advance run %s: %w", p.RunID, err)
		}
	}
	planned := advanceEvents(p)
	bodies, err := encodeEvents(planned)
	if err != nil {
		return nil, fmt.Errorf("advance run %s: %w", p.RunID, err)
	}
	var events []reprise.Event
	err = s.write(ctx, func(tx *txn) error {
		status, token, execution, last, err := tx.activeRun(p.RunID)
		if err != nil {
			return err
		}
		if token != p.Token {
			return reprise.ErrLeaseLost
		}
		events = slices.Clone(planned)
		for i := range events {
			events[i].Execution = execution
			if events[i].Type == reprise.EventTimerScheduled {
				events[i].FireAt = tx.now.Add(events[i].Delay)
			}
		}
		switch {
		case p.Finish != nil:
			_, err = tx.exec(`
				UPDATE runs SET status = ?, output = ?, error = ?, owner = '', lease_until = 0
				WHERE id = ?`, string(p.Finish.Status), blob(p.Finish.Output), errBlob, p.RunID)
			if err != nil {
				return err
			}
			if err := tx.dropWork(p.RunID); err != nil {
				return err
			}
		case status == reprise.RunPending:
			if _, err := tx.exec(`UPDATE runs SET status = 'running' WHERE id = ?`, p.RunID); err != nil {
				return err
			}
		}
		if err := tx.appendEvents(p.RunID, last, events, bodies); err != nil {
			return err
		}
		if p.Finish != nil {
			return nil
		}
		return tx.schedule(p, execution)
	})
	if err != nil {
		return nil, fmt.Errorf("advance run %s: %w", p.RunID, err)
	}
	return events, nil
}

// advanceEvents returns the events an advance appends: its steps and
// timers in position order, then the run's end. Execution, and the fire
// times of timers, are for the write to set.
func advanceEvents(p *reprise.RunAdvanceParams) []reprise.Event {
	events := make([]reprise.Event, 0, len(p.Steps)+len(p.Timers)+1)
	for _, st := range p.Steps {
		events = append(events, reprise.Event{
			Type: reprise.EventStepScheduled, Position: st.Position, Step: st.Name,
			Input: st.Input, Policy: st.PolicyText, IdempotencyKey: st.IdempotencyKey,
		})
	}
	for _, tm := range p.Timers {
		events = append(events, reprise.Event{Type: reprise.EventTimerScheduled, Position: tm.Position, Delay: tm.Delay})
	}
	slices.SortStableFunc(events, func(a, b reprise.Event) int { return cmp.Compare(a.Position, b.Position) })
	if f := p.Finish; f != nil {
		end := reprise.Event{}
		switch f.Status {
		case reprise.RunCompleted:
			end.Type, end.Output = reprise.EventRunCompleted, f.Output
		case reprise.RunFailed:
			end.Type, end.Error = reprise.EventRunFailed, f.Error
		case reprise.RunCancelled:
			end.Type, end.Error = reprise.EventRunCancelled, f.Error
		}
		events = append(events, end)
	}
	return events
}

// activeRun reads the state of a run that must be active, and the last
// Seq of its history: ErrNotFound when there is no such run,
// ErrRunFinished when it has finished.
func (tx *txn) activeRun(id string) (status reprise.RunStatus, token int64, execution int, last int64, err error) {
	var s string
	err = tx.queryRow(`SELECT status, token, execution, `+lastSeq+` FROM runs WHERE id = ?1`, id).
		Scan(&s, &token, &execution, &last)
	status = reprise.RunStatus(s)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", 0, 0, 0, reprise.ErrNotFound
	case err != nil:
		return "", 0, 0, 0, err
	case status.Final():
		return "", 0, 0, 0, reprise.ErrRunFinished
	}
	return status, token, execution, last, nil
}

// schedule makes an advance's steps ready tasks and its timers pending.
func (tx *txn) schedule(p *reprise.RunAdvanceParams, execution int) error {
	// Tasks get their ids in position order, so that claims of tasks ready
	// at the same time follow the workflow's order.
	steps := slices.SortedStableFunc(slices.Values(p.Steps), func(a, b reprise.StepSpec) int { return cmp.Compare(a.Position, b.Position) })
	for _, st := range steps {
		_, err := tx.exec(`
			INSERT INTO tasks (run_id, execution, position, step, input, idempotency_key, policy, timeout, ready_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			p.RunID, execution, st.Position, st.Name, blob(st.Input), st.IdempotencyKey, blob(st.Policy),
			int64(st.Timeout), tx.nanos)
		if err != nil {
			return fmt.Errorf("schedule step %d: %w", st.Position, err)
		}
	}
	for _, tm := range p.Timers {
		_, err := tx.exec(`INSERT INTO timers (run_id, execution, position, fire_at) VALUES (?, ?, ?, ?)`,
			p.RunID, execution, tm.Position, tx.nanos+int64(tm.Delay))
		if err != nil {
			return fmt.Errorf("schedule timer %d: %w", tm.Position, err)
		}
	}
	return nil
}

// dropWork deletes a finished run's tasks and timers: results of attempts
// still running then find no task and are rejected.
func (tx *txn) dropWork(runID string) error {
	if _, err := tx.exec(`DELETE FROM tasks WHERE run_id = ?`, runID); err != nil {
		return err
	}
	_, err := tx.exec(`DELETE FROM timers WHERE run_id = ?`, runID)
	return err
}

// RunCancel cancels an active run.
func (s *Store) RunCancel(ctx context.Context, p *reprise.RunCancelParams) (*reprise.Run, error) {
	var run *reprise.Run
	err := s.write(ctx, func(tx *txn) error {
		_, _, execution, last, err := tx.activeRun(p.ID)
		if err != nil {
			return err
		}
		_, err = tx.exec(`UPDATE runs SET status = 'cancelled', owner = '', lease_until = 0 WHERE id = ?`, p.ID)
		if err != nil {
			return err
		}
		cancelled := []reprise.Event{{Type: reprise.EventRunCancelled, Execution: execution, Reason: p.Reason}}
		if err := tx.appendEvents(p.ID, last, cancelled, nil); err != nil {
			return err
		}
		if err := tx.dropWork(p.ID); err != nil {
			return err
		}
		run, err = getRun(tx, p.ID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cancel run %s: %w", p.ID, err)
	}
	return run, nil
}
