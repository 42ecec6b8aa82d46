package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
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

// claimTasksSQL returns the statement that leases the oldest ready tasks
// of n step names, each up to its quota and all up to a total: a new
// attempt, a new token, and a lease cut to the attempt's timeout. Its
// parameters are the owner, now, the lease TTL, the total, then each step
// name and quota.
func claimTasksSQL(n int) string {
	steps := make([]string, n)
	for i := range steps {
		steps[i] = fmt.Sprintf(`
			SELECT * FROM (
				SELECT id, ready_at FROM tasks
				WHERE step = ?%d AND lease_until IS NULL AND ready_at <= ?2
				ORDER BY ready_at, id LIMIT ?%d)`, 5+2*i, 6+2*i)
	}
	return `
		UPDATE tasks SET
			attempt = attempt + 1,
			token = token + 1,
			owner = ?1,
			started_at = ?2,
			first_started_at = coalesce(first_started_at, ?2),
			lease_until = ?2 + CASE WHEN timeout > 0 AND timeout < ?3 THEN timeout ELSE ?3 END
		WHERE id IN (
			SELECT id FROM (` + strings.Join(steps, " UNION ALL ") + `)
			ORDER BY ready_at, id LIMIT ?4)
		RETURNING ` + taskColumns
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
	query := claimTasksSQL(len(quotas))
	var tasks []*reprise.Task
	err := s.write(ctx, func(tx *wtx) error {
		args := []any{p.Owner, tx.nanos, int64(p.LeaseTTL), total}
		for _, q := range quotas {
			args = append(args, q.Name, q.Limit)
		}
		var err error
		tasks, err = tx.claim(query, p.Owner, args)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	return tasks, nil
}

// claim runs a claim statement and appends AttemptStarted for each task
// it leased, oldest ready first.
func (tx *wtx) claim(query, owner string, args []any) ([]*reprise.Task, error) {
	rows, err := tx.QueryContext(tx.ctx, query, args...)
	if err != nil {
		return nil, err
	}
	type claim struct {
		task    *reprise.Task
		readyAt int64
	}
	var claims []claim
	for rows.Next() {
		t, readyAt, err := scanTask(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		claims = append(claims, claim{t, readyAt})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(claims, func(a, b claim) int {
		return cmp.Or(cmp.Compare(a.readyAt, b.readyAt), cmp.Compare(a.task.ID, b.task.ID))
	})
	tasks := make([]*reprise.Task, len(claims))
	for i, c := range claims {
		t := c.task
		err := tx.appendEvent(t.RunID, &reprise.Event{
			Type: reprise.EventAttemptStarted, Execution: t.Execution, Position: t.Position, Step: t.Step,
			Attempt: t.Attempt, Worker: owner, LeaseUntil: t.LeaseUntil, IdempotencyKey: t.IdempotencyKey,
		})
		if err != nil {
			return nil, err
		}
		tasks[i] = t
	}
	return tasks, nil
}

// TaskGet returns a task as it stands.
func (s *Store) TaskGet(ctx context.Context, id int64) (*reprise.Task, error) {
	var task *reprise.Task
	err := s.read(ctx, func(q querier, _ time.Time) error {
		t, _, err := scanTask(q.QueryRowContext(ctx, `SELECT `+taskColumns+` FROM tasks WHERE id = ?`, id))
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
	err := s.write(ctx, func(tx *wtx) error {
		err := tx.QueryRowContext(ctx, `
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
func (tx *wtx) endAttempt(query string, args ...any) (attempt, error) {
	var a attempt
	err := tx.QueryRowContext(tx.ctx, query, args...).Scan(&a.runID, &a.execution, &a.position, &a.step, &a.attempt)
	if errors.Is(err, sql.ErrNoRows) {
		return a, reprise.ErrLeaseLost
	}
	return a, err
}

// outcome appends the events to the run's history and returns them with
// the run's owner.
func (tx *wtx) outcome(runID string, events ...reprise.Event) (*reprise.Outcome, error) {
	for i := range events {
		if err := tx.appendEvent(runID, &events[i]); err != nil {
			return nil, err
		}
	}
	owner, err := tx.runOwner(runID)
	if err != nil {
		return nil, err
	}
	return &reprise.Outcome{RunID: runID, Owner: owner, Events: events}, nil
}

// TaskComplete records a successful attempt and removes its task.
func (s *Store) TaskComplete(ctx context.Context, p *reprise.TaskCompleteParams) (*reprise.Outcome, error) {
	var out *reprise.Outcome
	err := s.write(ctx, func(tx *wtx) error {
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
	err := s.write(ctx, func(tx *wtx) error {
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
	err := s.read(ctx, func(q querier, now time.Time) error {
		tasks = tasks[:0]
		rows, err := q.QueryContext(ctx, `
			SELECT `+taskColumns+` FROM tasks
			WHERE lease_until IS NOT NULL AND lease_until <= ?
			ORDER BY lease_until, id LIMIT ?`, now.UnixNano(), cmp.Or(p.Limit, 100))
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
