package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"reprise/store"
)

// taskColumns are the columns scanTask reads.
const taskColumns = `id, run_id, execution, position, step, input, idempotency_key, policy, timeout,
	attempt, token, lease_until, started_at, first_started_at, base, lapses, owner, step_version`

// scanTask reads a task, and into extra the columns a query selects after
// taskColumns.
func scanTask(row scanner, extra ...any) (*store.Task, error) {
	var t store.Task
	var input, policy []byte
	var timeout int64
	var leaseUntil, startedAt, firstStartedAt sql.NullInt64
	dest := append([]any{&t.ID, &t.RunID, &t.Execution, &t.Position, &t.Step, &input, &t.IdempotencyKey,
		&policy, &timeout, &t.Attempt, &t.Token, &leaseUntil, &startedAt, &firstStartedAt, &t.Base, &t.Lapses, &t.Owner,
		&t.StepVersion}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	t.Input, t.Policy, t.Timeout = input, policy, time.Duration(timeout)
	if leaseUntil.Valid {
		t.LeaseUntil = fromNanos(leaseUntil.Int64)
	}
	if startedAt.Valid {
		t.StartedAt = fromNanos(startedAt.Int64)
	}
	if firstStartedAt.Valid {
		t.FirstStartedAt = fromNanos(firstStartedAt.Int64)
	}
	return &t, nil
}

// readyTasksSQL returns the query for the oldest ready tasks of n step
// names, each up to its quota and all up to a total. Its parameters are
// now, the total, then each step name and quota.
//
// The store writes LIMIT +? rather than LIMIT ?: SQLite plans with a bare
// LIMIT parameter's value, and so prepares the statement again whenever
// the value changes (TestStatementsPreparedOnce).
func readyTasksSQL(n int) string {
	steps := make([]string, n)
	for i := range steps {
		steps[i] = fmt.Sprintf(`
			SELECT * FROM (
				SELECT id, ready_at FROM tasks
				WHERE step = ?%d AND lease_until IS NULL AND ready_at <= ?1
				ORDER BY ready_at, id LIMIT +?%d)`, 3+2*i, 4+2*i)
	}
	return `
		SELECT ` + taskColumns + `, (SELECT coalesce(max(seq), 0) FROM events WHERE run_id = tasks.run_id), ready_at
		FROM tasks WHERE id IN (
			SELECT id FROM (` + strings.Join(steps, " UNION ALL ") + `)
			ORDER BY ready_at, id LIMIT +?2)
		ORDER BY ready_at, id`
}

// TaskClaim leases the oldest ready tasks, up to each step's quota and the
// total limit, and appends AttemptStarted for each.
func (s *Store) TaskClaim(ctx context.Context, p *store.TaskClaimParams) ([]*store.Task, error) {
	var quotas []store.StepQuota
	for _, q := range p.Steps {
		if q.Limit > 0 {
			quotas = append(quotas, q)
		}
	}
	total := p.Total()
	if total == 0 {
		return nil, nil
	}
	query := readyTasksSQL(len(quotas))
	var tasks []*store.Task
	err := s.write(ctx, func(tx *txn) error {
		args := []any{tx.nanos, total}
		for _, q := range quotas {
			args = append(args, q.Name, q.Limit)
		}
		var err error
		tasks, err = tx.claim(query, args, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	return tasks, nil
}

// claim leases the tasks query finds, in its order, each for its next
// attempt (Task.Start), and appends their AttemptStarted. The write transaction holds SQLite's one write
// lock, so nothing can claim the tasks between the query and the update.
func (tx *txn) claim(query string, args []any, p *store.TaskClaimParams) ([]*store.Task, error) {
	rows, err := tx.query(query, args...)
	if err != nil {
		return nil, err
	}
	var tasks []*store.Task
	last := map[string]int64{} // each run's last Seq, as the claim appends
	for rows.Next() {
		var seq, readyAt int64
		t, err := scanTask(rows, &seq, &readyAt)
		if err != nil {
			rows.Close()
			return nil, err
		}
		t.ReadyAt = fromNanos(readyAt)
		if _, ok := last[t.RunID]; !ok {
			last[t.RunID] = seq
		}
		tasks = append(tasks, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	now := store.Now{At: tx.now}
	for _, t := range tasks {
		t.Start(p.Owner, p.LeaseTTL, now)
		_, err := tx.exec(`
			UPDATE tasks SET attempt = ?, token = ?, owner = ?, started_at = ?, first_started_at = ?, lease_until = ?
			WHERE id = ?`,
			t.Attempt, t.Token, t.Owner, t.StartedAt.UnixNano(), t.FirstStartedAt.UnixNano(), t.LeaseUntil.UnixNano(),
			t.ID)
		if err != nil {
			return nil, err
		}
		started := []store.Event{t.AttemptStarted()}
		if err := tx.appendEvents(t.RunID, last[t.RunID], started, nil); err != nil {
			return nil, err
		}
		last[t.RunID]++
		if p.Keep {
			_, err := tx.exec(`
				INSERT INTO attempts (task_id, token, run_id, execution, position, attempt) VALUES (?, ?, ?, ?, ?, ?)`,
				t.ID, t.Token, t.RunID, t.Execution, t.Position, t.Attempt)
			if err != nil {
				return nil, err
			}
		}
	}
	return tasks, nil
}

// TaskGet returns a task as it stands.
func (s *Store) TaskGet(ctx context.Context, id int64) (*store.Task, error) {
	var task *store.Task
	err := s.read(ctx, func(tx *txn) error {
		t, err := scanTask(tx.queryRow(`SELECT `+taskColumns+` FROM tasks WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		task = t
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get task %d: %w", id, err)
	}
	return task, nil
}

// TaskAttemptList returns the kept attempts of a task, by token.
func (s *Store) TaskAttemptList(ctx context.Context, p *store.TaskAttemptListParams) ([]store.TaskAttempt, error) {
	var attempts []store.TaskAttempt
	err := s.read(ctx, func(tx *txn) error {
		attempts = attempts[:0]
		rows, err := tx.query(`
			SELECT task_id, token, run_id, execution, position, attempt FROM attempts
			WHERE task_id = ? ORDER BY token`, p.TaskID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var a store.TaskAttempt
			if err := rows.Scan(&a.TaskID, &a.Token, &a.RunID, &a.Execution, &a.Position, &a.Attempt); err != nil {
				return err
			}
			attempts = append(attempts, a)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list attempts of task %d: %w", p.TaskID, err)
	}
	return attempts, nil
}

// TaskHeartbeat extends a live lease to now+LeaseTTL, never past the
// attempt's timeout.
func (s *Store) TaskHeartbeat(ctx context.Context, p *store.TaskHeartbeatParams) (time.Time, error) {
	var until int64
	err := s.write(ctx, func(tx *txn) error {
		err := tx.queryRow(`
			UPDATE tasks SET lease_until = CASE
				WHEN timeout > 0 AND started_at + timeout < ?1 + ?2 THEN started_at + timeout
				ELSE ?1 + ?2 END
			WHERE id = ?3 AND token = ?4 AND lease_until > ?1
			RETURNING lease_until`, tx.nanos, int64(p.LeaseTTL), p.TaskID, p.Token).Scan(&until)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrLeaseLost
		}
		return err
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("heartbeat task %d: %w", p.TaskID, err)
	}
	return fromNanos(until), nil
}

// An attempt is what a report on a leased attempt needs: its task as its
// row says (RunID, Execution, Position, Step, Attempt and Lapses), and its
// run's lease owner and last Seq.
type attempt struct {
	task  store.Task
	owner string
	last  int64
}

// leasedAttempt reads the attempt a report is about: its token must match
// and its lease must hold at now (or, for the reaper's report, have
// lapsed), and it must not have ended (store.Ended). Otherwise the report
// is stale: ErrLeaseLost.
func (tx *txn) leasedAttempt(taskID, token int64, named int, lapsed bool) (attempt, error) {
	lease := `t.lease_until > ?`
	if lapsed {
		lease = `t.lease_until <= ?`
	}
	var a attempt
	t := &a.task
	// The run is read by subquery, not by a join: a join made SQLite
	// prepare the statement again for every new task id.
	err := tx.queryRow(`
		SELECT t.run_id, t.execution, t.position, t.step, t.attempt, t.lapses,
			(SELECT owner FROM runs WHERE id = t.run_id),
			(SELECT coalesce(max(seq), 0) FROM events WHERE run_id = t.run_id)
		FROM tasks t
		WHERE t.id = ? AND t.token = ? AND `+lease, taskID, token, tx.nanos).
		Scan(&t.RunID, &t.Execution, &t.Position, &t.Step, &t.Attempt, &t.Lapses, &a.owner, &a.last)
	if errors.Is(err, sql.ErrNoRows) || err == nil && store.Ended(named, t.Attempt) {
		return a, store.ErrLeaseLost
	}
	return a, err
}

// report appends a report's events to the attempt's run and returns them
// as its outcome.
func (tx *txn) report(a attempt, events []store.Event) (*store.Outcome, error) {
	if err := tx.appendEvents(a.task.RunID, a.last, events, nil); err != nil {
		return nil, err
	}
	return &store.Outcome{RunID: a.task.RunID, Owner: a.owner, Events: events}, nil
}

// TaskComplete records a successful attempt and removes its task.
func (s *Store) TaskComplete(ctx context.Context, p *store.TaskCompleteParams) (*store.Outcome, error) {
	var out *store.Outcome
	err := s.write(ctx, func(tx *txn) error {
		a, err := tx.leasedAttempt(p.TaskID, p.Token, p.Attempt, false)
		if err != nil {
			return err
		}
		if _, err := tx.exec(`DELETE FROM tasks WHERE id = ?`, p.TaskID); err != nil {
			return err
		}
		out, err = tx.report(a, []store.Event{p.Completed(&a.task)})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("complete task %d: %w", p.TaskID, err)
	}
	return out, nil
}

// TaskFail records a failed attempt and the policy's decision: the task is
// ready again at the retry time, or the step fails and the task goes.
func (s *Store) TaskFail(ctx context.Context, p *store.TaskFailParams) (*store.Outcome, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("fail task %d: %w", p.TaskID, err)
	}
	var out *store.Outcome
	err := s.write(ctx, func(tx *txn) error {
		a, err := tx.leasedAttempt(p.TaskID, p.Token, p.Attempt, p.Expired)
		if err != nil {
			return err
		}
		now := store.Now{At: tx.now}
		events := p.Failed(make([]store.Event, 0, 2), &a.task, now)
		switch {
		case !p.Retry:
			// The step is kept as it failed, for a redrive.
			_, err := tx.exec(`
				INSERT OR REPLACE INTO failed_steps
					(run_id, execution, position, step, input, idempotency_key, policy, timeout, attempt, base,
					step_version, error_type)
				SELECT run_id, execution, position, step, input, idempotency_key, policy, timeout, attempt, base,
					step_version, ?
				FROM tasks WHERE id = ?`, p.Error.Type, p.TaskID)
			if err != nil {
				return err
			}
			if _, err := tx.exec(`DELETE FROM tasks WHERE id = ?`, p.TaskID); err != nil {
				return err
			}
		case p.LeasesNext():
			out, err = tx.retryLeased(p, a, events, now)
			return err
		default:
			_, err = tx.exec(`
				UPDATE tasks SET owner = '', lease_until = NULL, ready_at = ?, lapses = ?, error_type = ? WHERE id = ?`,
				events[0].RetryAt.UnixNano(), p.Lapses(a.task.Lapses), p.Error.Type, p.TaskID)
			if err != nil {
				return err
			}
		}
		out, err = tx.report(a, events)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("fail task %d: %w", p.TaskID, err)
	}
	return out, nil
}

// retryLeased retries a failed attempt at once: the task's next attempt
// starts, leased as p decides (Next), in the same statement that releases
// the failed one. Its AttemptStarted follows the
// events of the failure, and the leased task is the outcome's Next.
func (tx *txn) retryLeased(p *store.TaskFailParams, a attempt, events []store.Event, now store.Now) (*store.Outcome, error) {
	last, err := scanTask(tx.queryRow(`SELECT `+taskColumns+` FROM tasks WHERE id = ?`, p.TaskID))
	if err != nil {
		return nil, err
	}
	n, _ := p.Next(last, now)
	next := &n
	_, err = tx.exec(`
		UPDATE tasks SET attempt = ?, token = ?, owner = ?, ready_at = ?, started_at = ?, first_started_at = ?,
			lease_until = ?, lapses = ?, error_type = ?
		WHERE id = ?`,
		next.Attempt, next.Token, next.Owner, tx.nanos, next.StartedAt.UnixNano(), next.FirstStartedAt.UnixNano(),
		next.LeaseUntil.UnixNano(), next.Lapses, p.Error.Type, p.TaskID)
	if err != nil {
		return nil, err
	}
	out, err := tx.report(a, append(events, next.AttemptStarted()))
	if err != nil {
		return nil, err
	}
	out.Next = next
	return out, nil
}

// TaskListExpired returns leased tasks whose lease has lapsed, earliest
// expiry first.
func (s *Store) TaskListExpired(ctx context.Context, p *store.TaskListExpiredParams) ([]*store.Task, error) {
	var tasks []*store.Task
	err := s.read(ctx, func(tx *txn) error {
		tasks = tasks[:0]
		rows, err := tx.query(`
			SELECT `+taskColumns+` FROM tasks
			WHERE lease_until IS NOT NULL AND lease_until <= ?
			ORDER BY lease_until, id LIMIT +?`, tx.nanos, cmp.Or(p.Limit, 100))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			t, err := scanTask(rows)
			if err != nil {
				return err
			}
			tasks = append(tasks, t)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list expired tasks: %w", err)
	}
	return tasks, nil
}
