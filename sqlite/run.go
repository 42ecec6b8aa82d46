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
	"time"

	"reprise/store"
)

// runColumns are the columns scanRun reads. A run's updated time is its
// last event's.
const runColumns = `id, workflow, status, execution, coalesce(parent_id, ''), input, output, error, created_at,
	(SELECT at FROM events WHERE run_id = runs.id ORDER BY seq DESC LIMIT 1), trace_parent`

type scanner interface{ Scan(dest ...any) error }

func scanRun(row scanner) (*store.Run, error) {
	var r store.Run
	var status string
	var input, output, errJSON []byte
	var created int64
	var updated sql.NullInt64
	err := row.Scan(&r.ID, &r.Workflow, &status, &r.Execution, &r.ParentID, &input, &output, &errJSON, &created, &updated,
		&r.TraceParent)
	if err != nil {
		return nil, err
	}
	r.Status, r.Input, r.Output = store.RunStatus(status), input, output
	if errJSON != nil {
		r.Error = &store.ErrorInfo{}
		if err := json.Unmarshal(errJSON, r.Error); err != nil {
			return nil, fmt.Errorf("decode error of run %s: %w", r.ID, err)
		}
	}
	r.CreatedAt = fromNanos(created)
	r.UpdatedAt = fromNanos(updated.Int64)
	return &r, nil
}

func getRun(tx *txn, id string) (*store.Run, error) {
	run, err := scanRun(tx.queryRow(`SELECT `+runColumns+` FROM runs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	return run, err
}

// RunCreate creates a run, or returns the existing one with the id. With
// p.First, the new run is created running and the advance recorded at once.
func (s *Store) RunCreate(ctx context.Context, p *store.RunCreateParams) (store.RunLease, bool, error) {
	if err := p.Check(); err != nil {
		return store.RunLease{}, false, fmt.Errorf("create run %s: %w", p.ID, err)
	}
	startedBody, err := encodeEvents([]store.Event{p.Started()})
	if err != nil {
		return store.RunLease{}, false, fmt.Errorf("create run %s: %w", p.ID, err)
	}
	status := store.RunPending
	if p.Owner != "" {
		status = store.RunRunning
	}
	var first *preparedAdvance
	if p.First != nil {
		fp := *p.First
		fp.RunID = p.ID
		if first, err = prepareAdvance(&fp); err != nil {
			return store.RunLease{}, false, fmt.Errorf("create run %s: first advance: %w", p.ID, err)
		}
	}
	var lease store.RunLease
	var created bool
	err = s.write(ctx, func(tx *txn) error {
		lease, created = store.RunLease{}, false
		var token int64
		if p.Owner != "" {
			token = 1
		}
		n, err := tx.exec(`
			INSERT INTO runs (id, workflow, status, input, owner, token, created_at,
				parent_id, parent_position, parent_execution, trace_parent)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO NOTHING`,
			p.ID, p.Workflow, string(status), blob(p.Input), p.Owner, token, tx.nanos,
			nullString(p.ParentID), p.ParentPosition, p.ParentExecution, p.TraceParent)
		if err != nil {
			return err
		}
		if n == 0 {
			lease.Run, err = getRun(tx, p.ID)
			return err
		}
		if p.Owner != "" {
			if err := tx.holdLease(p.Owner, p.LeaseTTL); err != nil {
				return err
			}
		}
		started := []store.Event{p.Started()}
		if first == nil {
			if err := tx.appendEvents(p.ID, 0, started, startedBody); err != nil {
				return err
			}
		}
		run := &store.Run{
			ID: p.ID, Workflow: p.Workflow, Status: status, Input: p.Input,
			Execution: 1, ParentID: p.ParentID, CreatedAt: tx.now, UpdatedAt: tx.now, TraceParent: p.TraceParent,
		}
		lease = store.RunLease{Token: token, Run: run}
		if first != nil {
			// RunStarted goes in with the advance's events, in one insert.
			state := runState{
				status: status, token: token, execution: 1, workflow: p.Workflow, owner: p.Owner,
				parentID: p.ParentID, parentPosition: p.ParentPosition, parentExecution: p.ParentExecution,
			}
			if lease.Advanced, err = tx.advance(first, state, started, startedBody); err != nil {
				return err
			}
			lease.Advanced.Events = lease.Advanced.Events[1:]
			if f := p.First.Finish; f != nil {
				f.Apply(run)
			}
		}
		created = true
		return nil
	})
	if err != nil {
		return store.RunLease{}, false, fmt.Errorf("create run %s: %w", p.ID, err)
	}
	return lease, created, nil
}

// RunGet returns a run.
func (s *Store) RunGet(ctx context.Context, id string) (*store.Run, error) {
	var run *store.Run
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
func (s *Store) RunList(ctx context.Context, p *store.RunListParams) ([]*store.Run, error) {
	var where []string
	var args []any
	if p.Status != "" {
		where, args = append(where, "status = ?"+statusIndexed(p.Status)), append(args, string(p.Status))
	}
	if p.Workflow != "" {
		where, args = append(where, "workflow = ?"), append(args, p.Workflow)
	}
	if p.Before != "" {
		where = append(where, "(created_at, id) < (SELECT created_at, id FROM runs WHERE id = ?)")
		args = append(args, p.Before)
	}
	if !p.CreatedSince.IsZero() {
		where, args = append(where, "created_at >= ?"), append(args, toNanos(p.CreatedSince))
	}
	if !p.CreatedUntil.IsZero() {
		where, args = append(where, "created_at < ?"), append(args, toNanos(p.CreatedUntil))
	}
	if p.Retrying {
		where = append(where, "status = 'running'"+statusIndexed(store.RunRunning))
	}
	if p.Retrying || p.Step != "" || p.ErrorType != "" {
		failing, failingArgs := failingRunsSQL(p)
		where, args = append(where, "id IN ("+failing+")"), append(args, failingArgs...)
	}
	query := `SELECT ` + runColumns + ` FROM runs`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	query += ` ORDER BY created_at DESC, id DESC LIMIT +?`
	args = append(args, cmp.Or(p.Limit, 100))

	var runs []*store.Run
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

// failingRunsSQL returns the query of the ids of the runs with a failing
// step that p's Retrying, Step and ErrorType select, and its arguments:
// the tasks with a failed attempt (the small partial index tasks_failing)
// and, unless only waiting ones count, the failed steps.
func failingRunsSQL(p *store.RunListParams) (string, []any) {
	var cond string
	var args []any
	if p.Step != "" {
		cond, args = cond+" AND step = ?", append(args, p.Step)
	}
	if p.ErrorType != "" {
		cond, args = cond+" AND error_type = ?", append(args, p.ErrorType)
	}
	query := `SELECT run_id FROM tasks WHERE error_type IS NOT NULL` + cond
	if p.Retrying {
		return query + ` AND lease_until IS NULL`, args
	}
	return query + ` UNION ALL SELECT run_id FROM failed_steps WHERE true` + cond, append(args, args...)
}

// StatsGet counts the retrying runs and the ready tasks by step.
func (s *Store) StatsGet(ctx context.Context) (*store.Stats, error) {
	var stats *store.Stats
	err := s.read(ctx, func(tx *txn) error {
		stats = &store.Stats{Ready: map[string]int{}}
		err := tx.queryRow(`
			SELECT count(DISTINCT run_id) FROM tasks WHERE error_type IS NOT NULL AND lease_until IS NULL`).
			Scan(&stats.Retrying)
		if err != nil {
			return err
		}
		rows, err := tx.query(`
			SELECT step, count(*) FROM tasks WHERE lease_until IS NULL AND ready_at <= ? GROUP BY step`, tx.nanos)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var step string
			var n int
			if err := rows.Scan(&step, &n); err != nil {
				return err
			}
			stats.Ready[step] = n
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("get stats: %w", err)
	}
	return stats, nil
}

// statusIndexed returns, for a status that a partial index holds, that
// index's condition, for a query on the status to repeat: SQLite uses a
// partial index only for a query whose WHERE has its condition in it.
func statusIndexed(s store.RunStatus) string {
	switch s {
	case store.RunPending, store.RunRunning:
		return ` AND status IN ('pending', 'running')`
	case store.RunFailed, store.RunCancelled:
		return ` AND status IN ('failed', 'cancelled')`
	}
	return ""
}

// RunClaim leases active runs whose lease is free or has lapsed, oldest
// first, each with a new token.
func (s *Store) RunClaim(ctx context.Context, p *store.RunClaimParams) ([]store.RunLease, error) {
	filter := ""
	if p.Workflows != nil {
		filter = "AND +workflow IN (" + placeholders(len(p.Workflows)) + ")" // runs_free, not runs_workflow
	}
	query := `
		UPDATE runs SET owner = ?, token = token + 1, status = 'running'
		WHERE id IN (
			SELECT id FROM runs
			WHERE owner = '' AND status IN ('pending', 'running') ` + filter + `
			ORDER BY created_at, id LIMIT +?)
		RETURNING id, token`
	var leases []store.RunLease
	err := s.write(ctx, func(tx *txn) error {
		leases = leases[:0]
		if err := tx.releaseLapsed(); err != nil {
			return err
		}
		args := []any{p.Owner}
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
			var l store.RunLease
			l.Run = &store.Run{}
			if err := rows.Scan(&l.Run.ID, &l.Token); err != nil {
				return err
			}
			leases = append(leases, l)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(leases) == 0 {
			return nil
		}
		if err := tx.holdLease(p.Owner, p.LeaseTTL); err != nil {
			return err
		}
		for i := range leases {
			if leases[i].Run, err = getRun(tx, leases[i].Run.ID); err != nil {
				return err
			}
			// A row's seq is its newest event's (0003_event_rows.sql).
			if err := tx.queryRow(`SELECT MAX(seq) FROM events WHERE run_id = ?`, leases[i].Run.ID).Scan(&leases[i].LastSeq); err != nil {
				return err
			}
		}
		slices.SortFunc(leases, func(a, b store.RunLease) int {
			return cmp.Or(a.Run.CreatedAt.Compare(b.Run.CreatedAt), strings.Compare(a.Run.ID, b.Run.ID))
		})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim runs: %w", err)
	}
	return leases, nil
}

// holdLease makes owner's lease, which all its runs share, lapse no
// sooner than ttl from now (0011_owner_leases.sql).
func (tx *txn) holdLease(owner string, ttl time.Duration) error {
	_, err := tx.exec(`
		INSERT INTO run_owners (owner, lease_until) VALUES (?, ?)
		ON CONFLICT (owner) DO UPDATE SET lease_until = max(lease_until, excluded.lease_until)`,
		owner, tx.nanos+int64(ttl))
	return err
}

// releaseLapsed releases the runs of the owners whose lease lapsed, all of
// an owner's at once.
func (tx *txn) releaseLapsed() error {
	rows, err := tx.query(`DELETE FROM run_owners WHERE lease_until <= ? RETURNING owner`, tx.nanos)
	if err != nil {
		return err
	}
	var owners []string
	for rows.Next() {
		var o string
		if err := rows.Scan(&o); err != nil {
			rows.Close()
			return err
		}
		owners = append(owners, o)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, o := range owners {
		if err := tx.release(o); err != nil {
			return err
		}
	}
	return nil
}

// release gives up every active run owner holds.
func (tx *txn) release(owner string) error {
	_, err := tx.exec(`UPDATE runs SET owner = '' WHERE owner = ? AND status IN ('pending', 'running')`, owner)
	return err
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// RunRenew sets the owner's lease, which all its runs share, to lapse
// LeaseTTL from now. It refuses what RunRenewParams' Check refuses (a
// LeaseTTL of zero or less). An owner without a lease holds no runs.
func (s *Store) RunRenew(ctx context.Context, p *store.RunRenewParams) error {
	if err := p.Check(); err != nil {
		return fmt.Errorf("renew runs of %s: %w", p.Owner, err)
	}
	err := s.write(ctx, func(tx *txn) error {
		_, err := tx.exec(`UPDATE run_owners SET lease_until = ? WHERE owner = ?`, tx.nanos+int64(p.LeaseTTL), p.Owner)
		return err
	})
	if err != nil {
		return fmt.Errorf("renew runs of %s: %w", p.Owner, err)
	}
	return nil
}

// RunRelease releases the owner's run leases, for any engine to claim.
func (s *Store) RunRelease(ctx context.Context, p *store.RunReleaseParams) error {
	if err := p.Check(); err != nil {
		return fmt.Errorf("release runs of %s: %w", p.Owner, err)
	}
	err := s.write(ctx, func(tx *txn) error {
		if _, err := tx.exec(`DELETE FROM run_owners WHERE owner = ?`, p.Owner); err != nil {
			return err
		}
		return tx.release(p.Owner)
	})
	if err != nil {
		return fmt.Errorf("release runs of %s: %w", p.Owner, err)
	}
	return nil
}

// nullString gives a string as a column value: NULL when empty.
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}
