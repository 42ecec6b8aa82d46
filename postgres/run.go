package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"reprise"
)

// runColumns are the columns scanRun reads, in order.
const runColumns = `id, workflow, status, input, output, error, execution, created_at, updated_at`

// scanRun reads runColumns and then extra.
func scanRun(row pgx.Row, extra ...any) (*reprise.Run, error) {
	var (
		r            reprise.Run
		status       string
		input, outpt []byte
		errInfo      []byte
	)
	dest := append([]any{&r.ID, &r.Workflow, &status, &input, &outpt, &errInfo, &r.Execution, &r.CreatedAt, &r.UpdatedAt}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	r.Status = reprise.RunStatus(status)
	r.Input = rawJSON(input)
	r.Output = rawJSON(outpt)
	if errInfo != nil {
		r.Error = new(reprise.ErrorInfo)
		if err := json.Unmarshal(errInfo, r.Error); err != nil {
			return nil, fmt.Errorf("decode error of run %q: %w", r.ID, err)
		}
	}
	r.CreatedAt = r.CreatedAt.UTC()
	r.UpdatedAt = r.UpdatedAt.UTC()
	return &r, nil
}

// rawJSON returns b as a json.RawMessage, nil for a NULL.
func rawJSON(b []byte) json.RawMessage {
	if b == nil {
		return nil
	}
	return json.RawMessage(b)
}

// RunCreate creates a run and appends RunStarted; with p.Owner the run is
// leased to it. An existing id returns that run, unchanged, with
// created=false.
func (s *Store) RunCreate(ctx context.Context, p *reprise.RunCreateParams) (reprise.RunLease, bool, error) {
	if p.ID == "" || p.Workflow == "" {
		return reprise.RunLease{}, false, errors.New("create run: id and workflow are required")
	}
	var (
		lease   reprise.RunLease
		created bool
	)
	err := s.tx(ctx, func(tx *txn) error {
		created = false // tx may run this again
		run, err := scanRun(tx.QueryRow(ctx, `
			INSERT INTO reprise_run (id, workflow, status, input, owner, token, lease_until, last_seq, created_at, updated_at)
			SELECT $2, $3, 'pending', $4::json, $5, CASE WHEN $5 = '' THEN 0 ELSE 1 END,
				CASE WHEN $5 = '' THEN NULL ELSE c.now + $6::interval END, 1, c.now, c.now
			FROM (SELECT coalesce($1::timestamptz, now()) AS now) c
			ON CONFLICT (id) DO NOTHING
			RETURNING `+runColumns+`, token`,
			s.clock(), p.ID, p.Workflow, nullJSON(p.Input), p.Owner, p.LeaseTTL), &lease.Token)
		if errors.Is(err, pgx.ErrNoRows) {
			// The id exists: return that run as it is.
			run, err = scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+` FROM reprise_run WHERE id = $1`, p.ID))
			lease = reprise.RunLease{Run: run}
			return err
		}
		if err != nil {
			return err
		}
		created = true
		h := &runHead{id: run.ID, execution: run.Execution, updatedAt: run.UpdatedAt}
		a := newAppender(run.CreatedAt)
		if err := a.add(h, reprise.Event{Type: reprise.EventRunStarted, Workflow: p.Workflow, Input: p.Input}); err != nil {
			return err
		}
		// The row already says last_seq 1, for RunStarted.
		b := &tx.writes
		a.queueEvents(b)
		if p.Owner == "" {
			tx.out.add(Notice{Kind: NoticeRunReady, RunID: run.ID, Workflow: run.Workflow})
		}
		run.UpdatedAt = h.updatedAt
		lease.Run = run
		return nil
	})
	if err != nil {
		return reprise.RunLease{}, false, fmt.Errorf("create run %q: %w", p.ID, err)
	}
	return lease, created, nil
}

// RunGet returns a run, or ErrNotFound.
func (s *Store) RunGet(ctx context.Context, id string) (*reprise.Run, error) {
	run, err := scanRun(s.pool.QueryRow(ctx, `SELECT `+runColumns+` FROM reprise_run WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("get run %q: %w", id, reprise.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get run %q: %w", id, err)
	}
	return run, nil
}

// RunList lists runs newest first, filtered and paged by p.
func (s *Store) RunList(ctx context.Context, p *reprise.RunListParams) ([]*reprise.Run, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	// Only the filters in use go into the query, so that each combination
	// has a plan that uses its index.
	where := []string{"true"}
	args := []any{limit}
	filter := func(cond string, arg any) {
		args = append(args, arg)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if p.Status != "" {
		filter("status = $%d", string(p.Status))
	}
	if p.Workflow != "" {
		filter("workflow = $%d", p.Workflow)
	}
	if p.Before != "" {
		filter("(created_at, id) < (SELECT created_at, id FROM reprise_run WHERE id = $%d)", p.Before)
	}
	rows, err := s.pool.Query(ctx, `
		SELECT `+runColumns+` FROM reprise_run
		WHERE `+strings.Join(where, " AND ")+`
		ORDER BY created_at DESC, id DESC
		LIMIT $1`,
		args...)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*reprise.Run, error) { return scanRun(row) })
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	return runs, nil
}

// RunClaim leases up to p.Limit active runs that nobody holds or whose lease
// lapsed, oldest first. Each claim gives the run a new token.
func (s *Store) RunClaim(ctx context.Context, p *reprise.RunClaimParams) ([]reprise.RunLease, error) {
	if p.Owner == "" {
		return nil, errors.New("claim runs: owner is required")
	}
	if p.Limit <= 0 {
		return nil, nil
	}
	// The two candidate lists use the partial indexes; the outer select
	// locks and re-checks them. A row another claimer holds is skipped.
	rows, err := s.pool.Query(ctx, `
		WITH c AS (SELECT coalesce($1::timestamptz, now()) AS now),
		picked AS (
			SELECT r.id AS picked_id FROM reprise_run r, c
			WHERE r.id IN (
				(SELECT id FROM reprise_run
				 WHERE status IN ('pending', 'running') AND owner = ''
					AND ($3::text[] IS NULL OR workflow = ANY($3))
				 ORDER BY created_at, id LIMIT $4)
				UNION ALL
				(SELECT id FROM reprise_run, c
				 WHERE status IN ('pending', 'running') AND owner <> '' AND lease_until <= c.now
					AND ($3::text[] IS NULL OR workflow = ANY($3))
				 ORDER BY lease_until LIMIT $4))
			AND r.status IN ('pending', 'running') AND (r.owner = '' OR r.lease_until <= c.now)
			ORDER BY r.created_at, r.id
			LIMIT $4
			FOR UPDATE OF r SKIP LOCKED)
		UPDATE reprise_run r SET owner = $2, token = r.token + 1, lease_until = c.now + $5::interval
		FROM picked, c
		WHERE r.id = picked.picked_id
		RETURNING `+runColumns+`, token`,
		s.clock(), p.Owner, p.Workflows, p.Limit, p.LeaseTTL)
	if err != nil {
		return nil, fmt.Errorf("claim runs: %w", err)
	}
	leases, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (reprise.RunLease, error) {
		var l reprise.RunLease
		var err error
		l.Run, err = scanRun(row, &l.Token)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim runs: %w", err)
	}
	slices.SortFunc(leases, func(a, b reprise.RunLease) int {
		if c := a.Run.CreatedAt.Compare(b.Run.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.Run.ID, b.Run.ID)
	})
	return leases, nil
}

// RunRenew sets the leases of the owner's active runs to lapse p.LeaseTTL
// from now; a zero LeaseTTL releases them, and sends NoticeRunReady.
func (s *Store) RunRenew(ctx context.Context, p *reprise.RunRenewParams) error {
	if p.Owner == "" {
		return errors.New("renew run leases: owner is required")
	}
	// Rows are locked in id order, so that two renewals never deadlock.
	tag, err := s.pool.Exec(ctx, `
		WITH c AS (SELECT coalesce($1::timestamptz, now()) AS now),
		held AS (
			SELECT id AS held_id FROM reprise_run
			WHERE owner = $2 AND status IN ('pending', 'running')
			ORDER BY id FOR UPDATE)
		UPDATE reprise_run r SET
			owner = CASE WHEN $3::interval > '0' THEN r.owner ELSE '' END,
			lease_until = CASE WHEN $3::interval > '0' THEN c.now + $3::interval END
		FROM held, c
		WHERE r.id = held.held_id`,
		s.clock(), p.Owner, p.LeaseTTL)
	if err != nil {
		return fmt.Errorf("renew run leases of %q: %w", p.Owner, err)
	}
	if p.LeaseTTL <= 0 && tag.RowsAffected() > 0 {
		// Released runs wait for another engine to claim them.
		s.publish(outbox{{Kind: NoticeRunReady}})
	}
	return nil
}

// lockRun locks a run's row for appending to its history, and returns its
// head, token, status and the store's time.
func lockRun(ctx context.Context, tx *txn, clock any, id string) (h *runHead, token int64, status reprise.RunStatus, now time.Time, err error) {
	h = &runHead{id: id}
	var st string
	err = tx.QueryRow(ctx, `
		SELECT execution, last_seq, updated_at, owner, token, status, coalesce($1::timestamptz, now())
		FROM reprise_run WHERE id = $2 FOR UPDATE`,
		clock, id).Scan(&h.execution, &h.lastSeq, &h.updatedAt, &h.owner, &token, &st, &now)
	if errors.Is(err, pgx.ErrNoRows) {
		err = reprise.ErrNotFound
	}
	return h, token, reprise.RunStatus(st), now.UTC(), err
}

// RunAdvance records the steps and timers a workflow scheduled, in position
// order, and its end when p.Finish is set.
func (s *Store) RunAdvance(ctx context.Context, p *reprise.RunAdvanceParams) ([]reprise.Event, error) {
	if p.Finish != nil && !p.Finish.Status.Final() {
		return nil, fmt.Errorf("advance run %q: finish with status %q: not an end state", p.RunID, p.Finish.Status)
	}
	var events []reprise.Event
	err := s.tx(ctx, func(tx *txn) error {
		h, token, status, now, err := lockRun(ctx, tx, s.clock(), p.RunID)
		if err != nil {
			return err
		}
		if status.Final() {
			return reprise.ErrRunFinished
		}
		if token != p.Token {
			return reprise.ErrLeaseLost
		}
		a := newAppender(now)
		b := &tx.writes
		if err := schedule(a, b, &tx.out, h, p.Steps, p.Timers, p.Finish != nil); err != nil {
			return err
		}
		if p.Finish == nil {
			b.Queue(`UPDATE reprise_run SET status = 'running', last_seq = $2, updated_at = $3 WHERE id = $1`,
				h.id, h.lastSeq, h.updatedAt)
		} else if err := h.finish(a, b, p.Finish); err != nil {
			return err
		}
		a.queueEvents(b)
		if p.Finish != nil && h.owner != "" {
			tx.out.add(Notice{Kind: NoticeOutcome, RunID: h.id, Owner: h.owner})
		}
		events = a.events
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("advance run %q: %w", p.RunID, err)
	}
	return events, nil
}

// schedule appends StepScheduled and TimerScheduled in position order and
// queues the tasks and timers they start, unless the run finishes in the
// same advance: then they are only recorded.
func schedule(a *appender, b *pgx.Batch, out *outbox, h *runHead, steps []reprise.StepSpec, timers []reprise.TimerSpec, finishing bool) error {
	type item struct {
		step  *reprise.StepSpec
		timer *reprise.TimerSpec
	}
	items := make([]item, 0, len(steps)+len(timers))
	for i := range steps {
		items = append(items, item{step: &steps[i]})
	}
	for i := range timers {
		items = append(items, item{timer: &timers[i]})
	}
	pos := func(it item) int {
		if it.step != nil {
			return it.step.Position
		}
		return it.timer.Position
	}
	slices.SortStableFunc(items, func(x, y item) int { return pos(x) - pos(y) })

	var (
		tPos                         []int32
		tStep, tInput, tKey, tPolicy []*string
		tTimeout                     []time.Duration
		mPos                         []int32
		mFire                        []time.Time
		notified                     = map[string]bool{}
	)
	for _, it := range items {
		if st := it.step; st != nil {
			err := a.add(h, reprise.Event{
				Type: reprise.EventStepScheduled, Position: st.Position, Step: st.Name, Input: st.Input,
				Policy: st.PolicyText, IdempotencyKey: st.IdempotencyKey,
			})
			if err != nil {
				return err
			}
			name, key := st.Name, st.IdempotencyKey
			tPos = append(tPos, int32(st.Position))
			tStep = append(tStep, &name)
			tInput = append(tInput, jsonText(st.Input))
			tKey = append(tKey, &key)
			tPolicy = append(tPolicy, jsonText(st.Policy))
			tTimeout = append(tTimeout, st.Timeout)
			if !finishing && !notified[name] {
				notified[name] = true
				out.add(Notice{Kind: NoticeTaskReady, Step: name, At: a.now})
			}
			continue
		}
		tm := it.timer
		fire := a.now.Add(tm.Delay).Truncate(time.Microsecond)
		err := a.add(h, reprise.Event{Type: reprise.EventTimerScheduled, Position: tm.Position, Delay: tm.Delay, FireAt: fire})
		if err != nil {
			return err
		}
		mPos = append(mPos, int32(tm.Position))
		mFire = append(mFire, fire)
	}
	if finishing {
		return nil
	}
	if len(tPos) > 0 {
		b.Queue(`
			INSERT INTO reprise_task (run_id, execution, position, step, input, idempotency_key, policy, timeout, ready_at, created_at)
			SELECT $1, $2, position, step, input::json, key, policy::json, timeout, $3, $3
			FROM unnest($4::int[], $5::text[], $6::text[], $7::text[], $8::text[], $9::interval[])
				AS t(position, step, input, key, policy, timeout)`,
			h.id, h.execution, a.now, tPos, tStep, tInput, tKey, tPolicy, tTimeout)
	}
	if len(mPos) > 0 {
		b.Queue(`
			INSERT INTO reprise_timer (run_id, execution, position, fire_at)
			SELECT $1, $2, position, fire_at FROM unnest($3::int[], $4::timestamptz[]) AS t(position, fire_at)`,
			h.id, h.execution, mPos, mFire)
	}
	return nil
}

// jsonText returns b for a text[] element cast to json: nil for NULL.
func jsonText(b json.RawMessage) *string {
	if len(b) == 0 {
		return nil
	}
	s := string(b)
	return &s
}

// finish appends the run's end event and queues its end.
func (h *runHead) finish(a *appender, b *pgx.Batch, f *reprise.RunFinish) error {
	e := reprise.Event{Type: reprise.EventRunCancelled, Error: f.Error}
	switch f.Status {
	case reprise.RunCompleted:
		e = reprise.Event{Type: reprise.EventRunCompleted, Output: f.Output}
	case reprise.RunFailed:
		e = reprise.Event{Type: reprise.EventRunFailed, Error: f.Error}
	}
	if err := a.add(h, e); err != nil {
		return err
	}
	return h.end(b, f.Status, f.Output, f.Error)
}

// end queues the update that ends the run and the removal of its tasks and
// timers, so that results of running attempts are rejected.
func (h *runHead) end(b *pgx.Batch, status reprise.RunStatus, output json.RawMessage, errInfo *reprise.ErrorInfo) error {
	encErr, err := encodeError(errInfo)
	if err != nil {
		return err
	}
	b.Queue(`
		UPDATE reprise_run SET status = $2, output = $3::json, error = $4::json, owner = '', lease_until = NULL,
			last_seq = $5, updated_at = $6
		WHERE id = $1`,
		h.id, string(status), nullJSON(output), encErr, h.lastSeq, h.updatedAt)
	b.Queue(`DELETE FROM reprise_task WHERE run_id = $1`, h.id)
	b.Queue(`DELETE FROM reprise_timer WHERE run_id = $1`, h.id)
	return nil
}

// RunCancel cancels an active run: appends RunCancelled, ends the run and
// drops its tasks and timers.
func (s *Store) RunCancel(ctx context.Context, p *reprise.RunCancelParams) (*reprise.Run, error) {
	var run *reprise.Run
	err := s.tx(ctx, func(tx *txn) error {
		h, _, status, now, err := lockRun(ctx, tx, s.clock(), p.ID)
		if err != nil {
			return err
		}
		if status.Final() {
			return reprise.ErrRunFinished
		}
		a := newAppender(now)
		if err := a.add(h, reprise.Event{Type: reprise.EventRunCancelled, Reason: p.Reason}); err != nil {
			return err
		}
		b := &tx.writes
		if err := h.end(b, reprise.RunCancelled, nil, nil); err != nil {
			return err
		}
		a.queueEvents(b)
		if h.owner != "" {
			tx.out.add(Notice{Kind: NoticeOutcome, RunID: h.id, Owner: h.owner})
		}
		b.Queue(`SELECT `+runColumns+` FROM reprise_run WHERE id = $1`, h.id).QueryRow(func(row pgx.Row) error {
			run, err = scanRun(row)
			return err
		})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cancel run %q: %w", p.ID, err)
	}
	return run, nil
}
