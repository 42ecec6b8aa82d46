package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"reprise/postgres/internal/pgtx"
	"reprise/store"
)

// taskColumns are the columns scanTask reads, in order.
const taskColumns = `id, run_id, execution, position, step, input, idempotency_key, policy, timeout,
	attempt, token, lease_until, started_at, first_started_at, base, lapses, owner, step_version`

// scanTask reads taskColumns and then extra.
func scanTask(row pgx.Row, extra ...any) (*store.Task, error) {
	var (
		t                            store.Task
		input, policy                []byte
		lease, started, firstStarted *time.Time
	)
	dest := append([]any{&t.ID, &t.RunID, &t.Execution, &t.Position, &t.Step, &input, &t.IdempotencyKey, &policy, &t.Timeout,
		&t.Attempt, &t.Token, &lease, &started, &firstStarted, &t.Base, &t.Lapses, &t.Owner, &t.StepVersion}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	t.Input, t.Policy = rawJSON(input), rawJSON(policy)
	t.LeaseUntil, t.StartedAt, t.FirstStartedAt = utc(lease), utc(started), utc(firstStarted)
	return &t, nil
}

// TaskClaim leases up to each quota's limit of ready tasks of its step, and
// up to p.Limit in all, earliest ready first, and appends AttemptStarted for
// each.
//
// The claim statement also advances the runs' heads by the number of tasks
// it starts for each, as the appender numbers their events (the returned
// last_seq is the one before): a claim of tasks of many runs is then two
// statements, not one per run.
//
// Tasks and their runs are locked with SKIP LOCKED, so a claim never waits:
// a task whose run another transaction holds (say, one recording a sibling
// step's result) is left for the next claim. Because a claim never waits it
// cannot deadlock with the transactions that lock a run before its tasks.
//
// Each task's run is locked by a lateral lookup beside the task, so that no
// step of the statement joins two of its own lists of rows: planned as
// nested loops (their sizes unknown to a generic plan), such joins compared
// every run id with every other, 7,500 text comparisons and 10 ms for a
// claim of 87 tasks.
func (s *Store) TaskClaim(ctx context.Context, p *store.TaskClaimParams) ([]*store.Task, error) {
	if p.Owner == "" {
		return nil, errors.New("claim tasks: owner is required")
	}
	steps := make([]string, 0, len(p.Steps))
	limits := make([]int32, 0, len(p.Steps))
	for _, q := range p.Steps {
		if q.Limit > 0 {
			steps = append(steps, q.Name)
			limits = append(limits, int32(q.Limit))
		}
	}
	total := p.Total()
	if total == 0 {
		return nil, nil
	}
	var tasks []*store.Task
	err := s.committer.RunOwning(ctx, nil, func(tx *pgtx.Tx) error {
		rows, err := tx.Query(ctx, `
			WITH c AS (SELECT coalesce($1::timestamptz, statement_timestamp()) AS now),
			picked AS (
				SELECT x.* FROM c, unnest($2::text[], $3::int[]) AS q(step, lim), LATERAL (
					SELECT id AS picked_id, run_id AS picked_run, ready_at AS picked_ready
					FROM reprise_task
					WHERE step = q.step AND owner = '' AND ready_at <= c.now
					ORDER BY ready_at, id
					LIMIT q.lim
					FOR UPDATE SKIP LOCKED) x
				ORDER BY picked_ready, picked_id
				LIMIT $4),
			locked AS (
				SELECT picked.*, r.last_seq, r.updated_at FROM picked CROSS JOIN LATERAL (
					SELECT last_seq, updated_at FROM reprise_run
					WHERE id = picked_run
					FOR UPDATE SKIP LOCKED) r),
			heads AS (
				UPDATE reprise_run r SET last_seq = r.last_seq + n.started, updated_at = greatest(r.updated_at, c.now)
				FROM (SELECT picked_run, count(*) AS started FROM locked GROUP BY picked_run) n, c
				WHERE r.id = n.picked_run)
			UPDATE reprise_task t SET attempt = t.attempt + 1, token = t.token + 1, owner = $5,
				started_at = c.now, first_started_at = coalesce(t.first_started_at, c.now),
				lease_until = c.now + CASE WHEN t.timeout > '0' AND t.timeout < $6::interval THEN t.timeout ELSE $6::interval END
			FROM locked, c
			WHERE t.id = locked.picked_id
			RETURNING `+taskColumns+`, locked.last_seq, locked.updated_at, c.now, picked_ready`,
			s.clock(), steps, limits, total, p.Owner, p.LeaseTTL)
		if err != nil {
			return err
		}
		type claimed struct {
			task  *store.Task
			ready time.Time
		}
		heads := map[string]*runHead{}
		var now time.Time
		claims, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (claimed, error) {
			var (
				c claimed
				h runHead
			)
			t, err := scanTask(row, &h.lastSeq, &h.updatedAt, &now, &c.ready)
			if err != nil {
				return c, err
			}
			if heads[t.RunID] == nil {
				h.id = t.RunID
				heads[t.RunID] = &h
			}
			t.ReadyAt = c.ready.UTC()
			c.task = t
			return c, nil
		})
		if err != nil {
			return err
		}
		if err := tx.Own(slices.Collect(maps.Keys(heads))...); err != nil {
			return err
		}
		// Earliest ready first, as the claim picked them.
		slices.SortFunc(claims, func(x, y claimed) int {
			return cmp.Or(x.ready.Compare(y.ready), cmp.Compare(x.task.ID, y.task.ID))
		})
		a := newAppender(now.UTC())
		tasks = make([]*store.Task, len(claims))
		for i, c := range claims {
			t := c.task
			tasks[i] = t
			if err := a.add(heads[t.RunID], t.AttemptStarted()); err != nil {
				return err
			}
		}
		a.queueEvents(tx)
		if p.Keep && len(tasks) > 0 {
			queueKeep(tx, tasks)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	return tasks, nil
}

// queueKeep adds to tx's writes the statement that keeps the attempts of
// tasks (TaskClaimParams.Keep).
func queueKeep(tx *pgtx.Tx, tasks []*store.Task) {
	n := len(tasks)
	ids, tokens, runs := make([]int64, n), make([]int64, n), make([]string, n)
	executions, positions, attempts := make([]int32, n), make([]int32, n), make([]int32, n)
	for i, t := range tasks {
		ids[i], tokens[i], runs[i] = t.ID, t.Token, t.RunID
		executions[i], positions[i], attempts[i] = int32(t.Execution), int32(t.Position), int32(t.Attempt)
	}
	tx.QueueMergeable(`
		INSERT INTO reprise_attempt (task_id, token, run_id, execution, position, attempt)
		SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::int[], $5::int[], $6::int[])`,
		ids, tokens, runs, executions, positions, attempts)
}

// TaskAttemptList returns the kept attempts of a task, by token.
func (s *Store) TaskAttemptList(ctx context.Context, p *store.TaskAttemptListParams) ([]store.TaskAttempt, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT task_id, token, run_id, execution, position, attempt FROM reprise_attempt
		WHERE task_id = $1 ORDER BY token`, p.TaskID)
	if err == nil {
		var attempts []store.TaskAttempt
		attempts, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.TaskAttempt, error) {
			var a store.TaskAttempt
			err := row.Scan(&a.TaskID, &a.Token, &a.RunID, &a.Execution, &a.Position, &a.Attempt)
			return a, err
		})
		if err == nil {
			return attempts, nil
		}
	}
	return nil, fmt.Errorf("list attempts of task %d: %w", p.TaskID, err)
}

// TaskGet returns a task as it stands, or ErrNotFound once it is done or
// dropped.
func (s *Store) TaskGet(ctx context.Context, id int64) (*store.Task, error) {
	t, err := scanTask(s.pool.QueryRow(ctx, `SELECT `+taskColumns+` FROM reprise_task WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("get task %d: %w", id, store.ErrNotFound)
	}
	if err == nil {
		err = s.currentAttempt(ctx, t)
	}
	if err != nil {
		return nil, fmt.Errorf("get task %d: %w", id, err)
	}
	return t, nil
}

// TaskHeartbeat extends a live lease to p.LeaseTTL from now, never past the
// attempt's timeout.
func (s *Store) TaskHeartbeat(ctx context.Context, p *store.TaskHeartbeatParams) (time.Time, error) {
	var until time.Time
	err := s.pool.QueryRow(ctx, `
		WITH c AS (SELECT coalesce($1::timestamptz, statement_timestamp()) AS now)
		UPDATE reprise_task SET lease_until = CASE
			WHEN timeout > '0' THEN least(c.now + $4::interval, started_at + timeout)
			ELSE c.now + $4::interval END
		FROM c
		WHERE id = $2 AND token = $3 AND owner <> '' AND lease_until > c.now
		RETURNING lease_until`,
		s.clock(), p.TaskID, p.Token, p.LeaseTTL).Scan(&until)
	if errors.Is(err, pgx.ErrNoRows) {
		err = store.ErrLeaseLost
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("heartbeat task %d: %w", p.TaskID, err)
	}
	return until.UTC(), nil
}

// A leasedTask is a task locked for recording an attempt's end, with its
// run's head.
type leasedTask struct {
	// Task is the task as its row says, but Attempt: the attempt the
	// token's holder ran. It holds all the row only when it was read to
	// start its next attempt at once (lockTask's full).
	store.Task
	lease *time.Time // the row's lease_until, nil for none
	run   *runHead
	now   time.Time
	// next is the task's next attempt, to start at once (full), a copy of
	// Task until it is started.
	next *store.Task
}

// lockTask locks a task's run and reads the task, and checks the lease:
// token, held, and lapsed or not as expired says. Anything else is
// ErrLeaseLost. full also reads what the next attempt's lease needs
// (input, policy and the rest) and copies the task into next. attempt is
// the one the token's holder says it ran: a retry in place (TaskFail)
// leaves the row's behind it.
//
// The task is read without a lock, by a statement of its own after the
// one that locks the run (a read ahead of a later text, or in turn): it
// sees the task as the last holder of the run's lock left it, since every
// write of a task's token, owner, lease or lapses holds its run's lock,
// but a heartbeat's, which only puts off a lease that has not lapsed. A
// write of the task takes the task's lock as it writes; a retry in place
// never does, and the lock was a tuple write and a WAL record for nothing.
// The read need not check the task's run: a task's run never changes, and
// task ids are never used again.
func lockTask(ctx context.Context, tx *pgtx.Tx, clock any, id, token int64, attempt int, expired, full bool) (*leasedTask, error) {
	reads := lockTaskReads(clock, id, full)
	// One allocation for the task, its run's head, its next attempt and
	// what the reads scan into: a retry makes these for every attempt.
	sc := &taskScan{}
	t := &sc.task
	t.ID, t.run = id, &sc.head
	err := tx.QueryRow(ctx, reads[0].SQL, reads[0].Args...).Scan(
		append(sc.dest[:0], &t.run.id, &t.run.lastSeq, &t.run.updatedAt, &t.run.owner, &t.now)...)
	if errors.Is(err, pgx.ErrNoRows) {
		if tx.Ahead() { // or locked by another transaction
			return nil, pgtx.ErrStale
		}
		return nil, store.ErrLeaseLost // no such task
	}
	if err != nil {
		return nil, err
	}
	if err := tx.Own(t.run.id); err != nil {
		return nil, err
	}
	dest := append(sc.dest[:0], &t.Execution, &t.Position, &t.Step, &t.Attempt, &t.Token, &t.Owner, &t.lease, &t.Lapses)
	if full {
		dest = append(dest, &sc.input, &t.IdempotencyKey, &sc.policy, &t.Timeout, &sc.firstStarted, &t.Base,
			&t.StepVersion)
	}
	err = tx.QueryRow(ctx, reads[1].SQL, reads[1].Args...).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrLeaseLost // gone since its run was found
	}
	if err != nil {
		return nil, err
	}
	t.now = t.now.UTC()
	t.RunID, t.run.execution = t.run.id, t.Execution
	if t.Token != token || t.Owner == "" || t.lease == nil || t.lease.After(t.now) == expired {
		return nil, store.ErrLeaseLost
	}
	t.Attempt, t.LeaseUntil = max(t.Attempt, attempt), t.lease.UTC()
	if full {
		t.Input, t.Policy, t.FirstStartedAt = rawJSON(sc.input), rawJSON(sc.policy), utc(sc.firstStarted)
		t.next = &sc.next
		*t.next = t.Task
	}
	return t, nil
}

// taskScan is what lockTask allocates, in one piece.
type taskScan struct {
	task          leasedTask
	head          runHead
	next          store.Task
	input, policy []byte
	firstStarted  *time.Time
	dest          [15]any
}

// lockTaskReads are lockTask's reads, which a group may send ahead: the
// lock of the task's run, then the task.
func lockTaskReads(clock any, id int64, full bool) []*pgtx.Read {
	sql := readTaskSQL
	if full {
		sql = readTaskFullSQL
	}
	boxed := any(id) // once for both
	return []*pgtx.Read{pgtx.NewRead(lockTaskRunSQL, timestamptzInt8, clock, boxed), pgtx.NewRead(sql, bigint, boxed)}
}

// lockTaskRunSQL locks a task's run; readTaskSQL reads the task, and
// readTaskFullSQL also what the next attempt's lease needs.
const (
	lockTaskRunSQL = `
		SELECT id, last_seq, updated_at, owner, coalesce($1::timestamptz, statement_timestamp()) FROM reprise_run
		WHERE id = (SELECT run_id FROM reprise_task WHERE id = $2)
		FOR UPDATE`
	readTaskSQL     = readTaskHead + ` FROM reprise_task WHERE id = $1`
	readTaskFullSQL = readTaskHead + `, input, idempotency_key, policy, timeout, first_started_at, base,
		step_version FROM reprise_task WHERE id = $1`
	readTaskHead = `
		SELECT execution, position, step, attempt, token, owner, lease_until, lapses`
)

// TaskComplete records an attempt's result: appends StepCompleted and
// removes the task.
func (s *Store) TaskComplete(ctx context.Context, p *store.TaskCompleteParams) (*store.Outcome, error) {
	var o *store.Outcome
	err := s.committer.RunOwning(ctx, lockTaskReads(s.clock(), p.TaskID, false), func(tx *pgtx.Tx) error {
		t, err := lockTask(ctx, tx, s.clock(), p.TaskID, p.Token, p.Attempt, false, false)
		if err != nil {
			return err
		}
		a := newAppender(t.now)
		if err := a.add(t.run, p.Completed(&t.Task)); err != nil {
			return err
		}
		a.queueWith(tx, []*runHead{t.run}, advanceHeads+`
			DELETE FROM reprise_task WHERE id = ANY($10::bigint[])`,
			append(headsArgs(t.run), []int64{t.ID})...)
		tx.Notify(Notice{Kind: NoticeOutcome, RunID: t.run.id, Owner: t.run.owner, Seq: t.run.lastSeq})
		o = &store.Outcome{RunID: t.run.id, Owner: t.run.owner, Events: a.events}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("complete task %d: %w", p.TaskID, err)
	}
	return o, nil
}

// TaskFail records a failed attempt and the policy's decision (Failed):
// appends AttemptFailed, then makes the task ready again after p.Delay, or
// appends StepFailed and removes it. With p.LeaseNext and a retry at once,
// it starts the next attempt instead of making the task ready: the task
// stays locked from the failure to the new lease, so no claim can come
// between.
func (s *Store) TaskFail(ctx context.Context, p *store.TaskFailParams) (*store.Outcome, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("fail task %d: %w", p.TaskID, err)
	}
	leaseNext := p.LeasesNext()
	var o *store.Outcome
	err := s.committer.RunOwning(ctx, lockTaskReads(s.clock(), p.TaskID, leaseNext), func(tx *pgtx.Tx) error {
		t, err := lockTask(ctx, tx, s.clock(), p.TaskID, p.Token, p.Attempt, p.Expired, leaseNext)
		if err != nil {
			return err
		}
		if p.Expired {
			if later, err := laterAttempt(ctx, tx, t); err != nil || later {
				return cmp.Or(err, store.ErrLeaseLost)
			}
		}
		a := newAppender(t.now)
		var buf [2]store.Event
		events := p.Failed(buf[:0], &t.Task, store.Now{At: t.now, Precision: time.Microsecond})
		for _, e := range events {
			if err := a.add(t.run, e); err != nil {
				return err
			}
		}
		switch {
		case leaseNext:
			next, inPlace, err := startNext(a, t, p)
			if err != nil {
				return err
			}
			o = &store.Outcome{RunID: t.run.id, Owner: t.run.owner, Events: a.events, Next: next}
			if inPlace {
				a.queue(tx)
				return nil
			}
			a.queueWith(tx, []*runHead{t.run}, advanceHeads+`
				UPDATE reprise_task t SET attempt = n.attempt, token = n.token, owner = n.owner,
					started_at = n.started_at, lease_until = n.lease_until, lapses = n.lapses, error_type = n.error_type
				FROM unnest($10::bigint[], $11::int[], $12::bigint[], $13::text[], $14::timestamptz[],
					$15::timestamptz[], $16::int[], $17::text[])
					AS n(id, attempt, token, owner, started_at, lease_until, lapses, error_type)
				WHERE t.id = n.id`,
				append(headsArgs(t.run), []int64{t.ID}, []int32{int32(next.Attempt)}, []int64{next.Token},
					[]string{next.Owner}, []time.Time{next.StartedAt}, []time.Time{next.LeaseUntil},
					[]int32{int32(next.Lapses)}, []string{p.Error.Type})...)
			return nil
		case p.Retry:
			a.queueWith(tx, []*runHead{t.run}, advanceHeads+`
				UPDATE reprise_task t SET owner = '', lease_until = NULL, ready_at = r.ready_at, attempt = r.attempt,
					lapses = r.lapses, error_type = r.error_type
				FROM unnest($10::bigint[], $11::timestamptz[], $12::int[], $13::int[], $14::text[])
					AS r(id, ready_at, lapses, attempt, error_type)
				WHERE t.id = r.id`,
				append(headsArgs(t.run), []int64{t.ID}, []time.Time{events[0].RetryAt},
					[]int32{int32(p.Lapses(t.Lapses))}, []int32{int32(t.Attempt)}, []string{p.Error.Type})...)
			tx.Notify(Notice{Kind: NoticeTaskReady, Step: t.Step, At: events[0].RetryAt})
		default:
			// The task moves aside, as it was scheduled, for RunRedrive.
			a.queueWith(tx, []*runHead{t.run}, advanceHeads+`,
				failed AS (
					DELETE FROM reprise_task t
					USING unnest($10::bigint[], $11::bigint[], $12::int[], $13::text[]) AS f(id, seq, attempt, error_type)
					WHERE t.id = f.id
					RETURNING t.run_id, t.execution, t.position, t.step, t.input, t.idempotency_key, t.policy,
						t.timeout, f.attempt, f.seq, t.step_version, f.error_type)
				INSERT INTO reprise_step_failed (run_id, execution, position, step, input, idempotency_key, policy,
					timeout, attempt, seq, step_version, error_type)
				SELECT run_id, execution, position, step, input, idempotency_key, policy, timeout, attempt, seq,
					step_version, error_type
				FROM failed
				ON CONFLICT (run_id, execution, position) DO UPDATE SET step = excluded.step, input = excluded.input,
					idempotency_key = excluded.idempotency_key, policy = excluded.policy, timeout = excluded.timeout,
					attempt = excluded.attempt, seq = excluded.seq, step_version = excluded.step_version,
					error_type = excluded.error_type`,
				append(headsArgs(t.run), []int64{t.ID}, []int64{t.run.lastSeq}, []int32{int32(t.Attempt)},
					[]string{p.Error.Type})...)
			tx.Notify(Notice{Kind: NoticeOutcome, RunID: t.run.id, Owner: t.run.owner, Seq: t.run.lastSeq})
		}
		o = &store.Outcome{RunID: t.run.id, Owner: t.run.owner, Events: a.events}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("fail task %d: %w", p.TaskID, err)
	}
	return o, nil
}

// laterAttempt reports whether t's step has started an attempt after the
// one the reaper read. A retry in place keeps the token and leaves the row
// at the attempt before; a reaper that listed the row before that retry
// committed would otherwise fail, under the same token, an attempt that
// has already ended. The run is locked: the history read is the truth.
func laterAttempt(ctx context.Context, tx *pgtx.Tx, t *leasedTask) (bool, error) {
	started, err := lastStarted(ctx, tx, &t.Task)
	return store.Ended(t.Attempt, started.Attempt), err
}

// startNext starts t's next attempt, t.next, as p decides (Next), and
// appends its AttemptStarted. An attempt started in place leaves the
// task's row as it was, its attempt and started_at those of the last
// claim (the history has the rest: currentAttempt): the retry writes its
// events and its run's head, and not the task.
func startNext(a *appender, t *leasedTask, p *store.TaskFailParams) (n *store.Task, inPlace bool, err error) {
	*t.next, inPlace = p.Next(&t.Task, store.Now{At: a.now, Precision: time.Microsecond})
	n = t.next
	err = a.add(t.run, n.AttemptStarted())
	return n, inPlace, err
}

// TaskListExpired returns up to p.Limit (zero: 100) leased tasks whose
// lease has lapsed, earliest first.
func (s *Store) TaskListExpired(ctx context.Context, p *store.TaskListExpiredParams) ([]*store.Task, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.pool.Query(ctx, `
		SELECT `+taskColumns+` FROM reprise_task
		WHERE owner <> '' AND lease_until <= coalesce($1::timestamptz, statement_timestamp())
		ORDER BY lease_until, id
		LIMIT $2`,
		s.clock(), limit)
	if err != nil {
		return nil, fmt.Errorf("list expired tasks: %w", err)
	}
	tasks, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*store.Task, error) { return scanTask(row) })
	if err != nil {
		return nil, fmt.Errorf("list expired tasks: %w", err)
	}
	for _, t := range tasks {
		if err := s.currentAttempt(ctx, t); err != nil {
			return nil, fmt.Errorf("list expired tasks: %w", err)
		}
	}
	return tasks, nil
}

// currentAttempt sets a leased task's Attempt and StartedAt to those of
// its step's last AttemptStarted, when that is later than the row's: an
// attempt started in place (startNext) leaves the row as the last claim
// wrote it. That event is most often in the run's newest row.
func (s *Store) currentAttempt(ctx context.Context, t *store.Task) error {
	if t.LeaseUntil.IsZero() {
		return nil // ready: the row is the claim's to write
	}
	started, err := lastStarted(ctx, s.pool, t)
	if err != nil {
		return err
	}
	if started.Attempt > t.Attempt {
		t.Attempt, t.StartedAt = started.Attempt, started.At
	}
	return nil
}

// lastStarted returns the last AttemptStarted of t's step in its run's
// history, or the zero Event.
func lastStarted(ctx context.Context, q querier, t *store.Task) (last store.Event, err error) {
	err = newestFirst(ctx, q, t.RunID, func(events []store.Event) bool {
		for _, e := range slices.Backward(events) {
			if e.Type == store.EventAttemptStarted && e.Execution == t.Execution && e.Position == t.Position {
				last = e
				return true
			}
		}
		return false
	})
	return last, err
}
