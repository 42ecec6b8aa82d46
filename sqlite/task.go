package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"reprise"
)

// taskColumns are the columns scanTask reads.
const taskColumns = `id, run_id, execution, position, step, input, idempotency_key, policy, timeout,
	attempt, token, lease_until, started_at, first_started_at, ready_at`

// scanTask reads a task and its ready time, by which claims are ordered.
func scanTask(row scanner) (*reprise.Task, int64, error) {
	var t reprise.Task
	var input, policy []byte
	var timeout, readyAt int64
	var leaseUntil, startedAt, firstStartedAt sql.NullInt64
	err := row.Scan(&t.ID, &t.RunID, &t.Execution, &t.Position, &t.Step, &input, &t.IdempotencyKey,
		&policy, &timeout, &t.Attempt, &t.Token, &leaseUntil, &startedAt, &firstStartedAt, &readyAt)
	if err != nil {
		return nil, 0, err
	}
	t.Input, t.Policy = input, policy
	t.Timeout = time.Duration(timeout)
	if leaseUntil.Valid {
		t.LeaseUntil = fromNanos(leaseUntil.Int64)
	}
	if startedAt.Valid {
		t.StartedAt = fromNanos(startedAt.Int64)
	}
	if firstStartedAt.Valid {
		t.FirstStartedAt = fromNanos(firstStartedAt.Int64)
	}
	return &t, readyAt, nil
}

// readyTasksSQL returns the query for the oldest ready tasks of n step
// names, each up to its quota and all up to a total. Its parameters are
// now, the total, then each step name and quota.
func readyTasksSQL(n int) string {
	steps := make([]string, n)
	for i := range steps {
		steps[i] = fmt.Sprintf(`
			SELECT * FROM (
				SELECT id, ready_at FROM tasks
				WHERE step = ?%d AND lease_until IS NULL AND ready_at <= ?1
				ORDER BY ready_at, id LIMIT ?%d)`, 3+2*i, 4+2*i)
	}
	return `
		SELECT ` + taskColumns + ` FROM tasks WHERE id IN (
			SELECT id FROM (` + strings.Join(steps, " UNION ALL ") + `)
			ORDER BY ready_at, id LIMIT ?2)
		ORDER BY ready_at, id`
}

// TaskClaim leases the oldest ready tasks, up to each step's quota and the
// total limit, and appends AttemptStarted for each.
func (s *Store) TaskClaim(ctx context.Context, p *reprise.TaskClaimParams) ([]*reprise.Task, error) {
	var quotas []reprise.StepQuota
	total := 0
	for _, q := range p.Steps {
		if q.Limit > 0 {
			quotas = append(quotas, q)
			total += q.Limit
		}
	}
	if p.Limit > 0 {
		total = min(total, p.Limit)
	}
	if total == 0 {
		return nil, nil
	}
	query := readyTasksSQL(len(quotas))
	var tasks []*reprise.Task
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

// claim leases the tasks query finds, in its order: a new attempt under a
// new token, with a lease cut to the attempt's timeout. It appends
// AttemptStarted for each. The write transaction holds SQLite's one write
// lock, so nothing can claim the tasks between the query and the update.
func (tx *txn) claim(query string, args []any, p *reprise.TaskClaimParams) ([]*reprise.Task, error) {
	rows, err := tx.query(query, args...)
	if err != nil {
		return nil, err
	}
	var tasks []*reprise.Task
	for rows.Next() {
		t, _, err := scanTask(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		tasks = append(tasks, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, t := range tasks {
		t.Attempt++
		t.Token++
		t.StartedAt = tx.now
		if t.FirstStartedAt.IsZero() {
			t.FirstStartedAt = tx.now
		}
		lease := p.LeaseTTL
		if t.Timeout > 0 && t.Timeout < lease {
			lease = t.Timeout
		}
		t.LeaseUntil = tx.now.Add(lease)
		_, err := tx.exec(`
			UPDATE tasks SET attempt = ?, token = ?, owner = ?, started_at = ?, first_started_at = ?, lease_until = ?
			WHERE id = ?`,
			t.Attempt, t.Token, p.Owner, tx.nanos, t.FirstStartedAt.UnixNano(), t.LeaseUntil.UnixNano(), t.ID)
		if err != nil {
			return nil, err
		}
		var last int64
		if err := tx.queryRow(`SELECT `+lastSeq, t.RunID).Scan(&last); err != nil {
			return nil, err
		}
		started := []reprise.Event{{
			Type: reprise.EventAttemptStarted, Execution: t.Execution, Position: t.Position, Step: t.Step,
			Attempt: t.Attempt, Worker: p.Owner, LeaseUntil: t.LeaseUntil, IdempotencyKey: t.IdempotencyKey,
		}}
		if err := tx.appendEvents(t.RunID, last, started, nil); err != nil {
			return nil, err
		}
	}
	return tasks, nil
}

// TaskGet returns a task as it stands.
func (s *Store) TaskGet(ctx context.Context, id int64) (*reprise.Task, error) {
	var task *reprise.Task
	err := s.read(ctx, func(tx *txn) error {
		t, _, err := scanTask(tx.queryRow(`SELECT `+taskColumns+` FROM tasks WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return reprise.ErrNotFound
		}
		task = t
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get task %d: %w", id, err)
	}
	return task, nil
}

// TaskHeartbeat extends a live lease to now+LeaseTTL, never past the
// attempt's timeout.
func (s *Store) TaskHeartbeat(ctx context.Context, p *reprise.TaskHeartbeatParams) (time.Time, error) {
	var until int64
	err := s.write(ctx, func(tx *txn) error {
		err := tx.queryRow(`
			UPDATE tasks SET lease_until = CASE
				WHEN timeout > 0 AND started_at + timeout < ?1 + ?2 THEN started_at + timeout
				ELSE ?1 + ?2 END
			WHERE id = ?3 AND token = ?4 AND lease_until > ?1
			RETURNING lease_until`, tx.nanos, int64(p.LeaseTTL), p.TaskID, p.Token).Scan(&until)
		if errors.Is(err, sql.ErrNoRows) {
			return reprise.ErrLeaseLost
		}
		return err
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("heartbeat task %d: %w", p.TaskID, err)
	}
	return fromNanos(until), nil
}

// An attempt is the part of a task that its end events name.
type attempt struct {
	runID     string
	execution int
	position  int
	step      string
	attempt   int
}

const attemptColumns = `run_id, execution, position, step, attempt`

// endAttempt runs query, which ends a leased attempt and returns its
// attemptColumns, or nothing when the token or lease does not hold.
func (tx *txn) endAttempt(query string, args ...any) (attempt, error) {
	var a attempt
	err := tx.queryRow(query, args...).Scan(&a.runID, &a.execution, &a.position, &a.step, &a.attempt)
	if errors.Is(err, sql.ErrNoRows) {
		return a, reprise.ErrLeaseLost
	}
	return a, err
}

// TaskComplete records a successful attempt and removes its task.
func (s *Store) TaskComplete(ctx context.Context, p *reprise.TaskCompleteParams) (*reprise.Outcome, error) {
	var out *reprise.Outcome
	err := s.write(ctx, func(tx *txn) error {
		a, err := tx.endAttempt(`
			DELETE FROM tasks WHERE id = ? AND token = ? AND lease_until > ?
			RETURNING `+attemptColumns, p.TaskID, p.Token, tx.nanos)
		if err != nil {
			return err
		}
		out, err = tx.outcome(a.runID, reprise.Event{
			Type: reprise.EventStepCompleted, Execution: a.execution, Position: a.position, Step: a.step,
			Attempt: a.attempt, Output: p.Output,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("complete task %d: %w", p.TaskID, err)
	}
	return out, nil
}

// The lease conditions of TaskFail: a worker's report needs a live lease,
// the reaper's a lapsed one.
const (
	leaseLive   = `lease_until > ?`
	leaseLapsed = `lease_until <= ?`
)

// TaskFail records a failed attempt and the policy's decision.
func (s *Store) TaskFail(ctx context.Context, p *reprise.TaskFailParams) (*reprise.Outcome, error) {
	lease := leaseLive
	if p.Expired {
		lease = leaseLapsed
	}
	var out *reprise.Outcome
	err := s.write(ctx, func(tx *txn) error {
		failed := reprise.Event{Type: reprise.EventAttemptFailed, Error: &p.Error, Rule: p.Rule}
		var a attempt
		var err error
		if p.Retry {
			retryAt := tx.now.Add(p.Delay)
			a, err = tx.endAttempt(`
				UPDATE tasks SET owner = '', lease_until = NULL, ready_at = ?
				WHERE id = ? AND token = ? AND `+lease+`
				RETURNING `+attemptColumns, retryAt.UnixNano(), p.TaskID, p.Token, tx.nanos)
			failed.Delay, failed.RetryAt = p.Delay, retryAt
		} else {
			a, err = tx.endAttempt(`
				DELETE FROM tasks WHERE id = ? AND token = ? AND `+lease+`
				RETURNING `+attemptColumns, p.TaskID, p.Token, tx.nanos)
			failed.Reason = p.Reason
		}
		if err != nil {
			return err
		}
		failed.Execution, failed.Position, failed.Step, failed.Attempt = a.execution, a.position, a.step, a.attempt
		events := []reprise.Event{failed}
		if !p.Retry {
			events = append(events, reprise.Event{
				Type: reprise.EventStepFailed, Execution: a.execution, Position: a.position, Step: a.step,
				Attempt: a.attempt, Error: &p.Error, Reason: p.Reason,
			})
		}
		out, err = tx.outcome(a.runID, events...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("fail task %d: %w", p.TaskID, err)
	}
	return out, nil
}

// TaskListExpired returns leased tasks whose lease has lapsed, earliest
// expiry first.
func (s *Store) TaskListExpired(ctx context.Context, p *reprise.TaskListExpiredParams) ([]*reprise.Task, error) {
	var tasks []*reprise.Task
	err := s.read(ctx, func(tx *txn) error {
		tasks = tasks[:0]
		rows, err := tx.query(`
			SELECT `+taskColumns+` FROM tasks
			WHERE lease_until IS NOT NULL AND lease_until <= ?
			ORDER BY lease_until, id LIMIT ?`, tx.nanos, cmp.Or(p.Limit, 100))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			t, _, err := scanTask(rows)
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
