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
	"github.com/jackc/pgx/v5/pgconn"

	"reprise/postgres/internal/pgtx"
	"reprise/store"
)

// runColumns are the columns scanRun reads, in order.
const runColumns = `id, workflow, status, input, output, error, execution, parent_id, created_at, updated_at, trace_parent`

// scanRun reads runColumns and then extra.
func scanRun(row pgx.Row, extra ...any) (*store.Run, error) {
	var (
		r            store.Run
		status       string
		input, outpt []byte
		errInfo      []byte
	)
	dest := append([]any{&r.ID, &r.Workflow, &status, &input, &outpt, &errInfo, &r.Execution, &r.ParentID, &r.CreatedAt, &r.UpdatedAt,
		&r.TraceParent}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	r.Status = store.RunStatus(status)
	r.Input = rawJSON(input)
	r.Output = rawJSON(outpt)
	if errInfo != nil {
		r.Error = new(store.ErrorInfo)
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
func (s *Store) RunCreate(ctx context.Context, p *store.RunCreateParams) (store.RunLease, bool, error) {
	if err := p.Check(); err != nil {
		return store.RunLease{}, false, fmt.Errorf("create run %q: %w", p.ID, err)
	}
	var first *store.RunAdvanceParams
	if p.First != nil {
		fp := *p.First
		fp.RunID = p.ID
		first = &fp
	}
	var (
		lease   store.RunLease
		created bool
	)
	insert := createRead(s.clock(), p)
	var reads []*pgtx.Read
	if p.ParentID == "" && (first == nil || len(first.Completed) == 0) {
		// A run without a parent is inserted ahead, with the group's
		// other inserts; one with a parent updates its parent first.
		// Handed results would be read after it, and could fail the
		// transition after it wrote.
		reads = []*pgtx.Read{insert}
	}
	err := s.committer.RunOwning(ctx, reads, func(tx *pgtx.Tx) error {
		created = false // tx may run this again
		// The only runs it writes to.
		if err := tx.Own(p.ID, p.ParentID); err != nil {
			return err
		}
		if p.ParentID != "" {
			// The parent first, as every transaction that locks both
			// does; ending it then finds this child.
			rows, err := tx.Query(ctx, `UPDATE reprise_run SET has_children = true WHERE id = $1`, p.ParentID)
			if err != nil {
				return err
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
		}
		run, err := scanRun(tx.QueryRow(ctx, insert.SQL, insert.Args...), &lease.Token)
		if errors.Is(err, pgx.ErrNoRows) {
			// The id exists (inserted ahead, by another transition of the
			// group too): return that run as it is.
			run, err = scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+` FROM reprise_run WHERE id = $1`, p.ID))
			lease = store.RunLease{Run: run}
			return err
		}
		if err != nil {
			return err
		}
		created = true
		h := &runHead{id: run.ID, execution: run.Execution, updatedAt: run.UpdatedAt}
		a := newAppender(run.CreatedAt)
		if err := a.add(h, p.Started()); err != nil {
			return err
		}
		// The row already says last_seq 1, for RunStarted.
		a.queueEvents(tx)
		if p.Owner == "" {
			tx.Notify(Notice{Kind: NoticeRunReady, RunID: run.ID, Workflow: run.Workflow})
		}
		run.UpdatedAt = h.updatedAt
		lease.Run = run
		if first != nil {
			first.Token = lease.Token
			// The new run is locked, and what its row says is known; a run
			// with a parent is read with it (the parent's head, if the
			// advance ends the run).
			var known *lockedRun
			if p.ParentID == "" {
				known = &lockedRun{runHead: h, token: lease.Token, status: run.Status, workflow: run.Workflow}
				h.owner = p.Owner
			}
			if lease.Advanced, err = s.advance(ctx, tx, first, known, run.CreatedAt); err != nil {
				return err
			}
			advanced(run, first.Finish, lease.Advanced.Events)
		}
		return nil
	})
	if err != nil {
		return store.RunLease{}, false, fmt.Errorf("create run %q: %w", p.ID, err)
	}
	return lease, created, nil
}

// createRead is RunCreate's insert of the run, which a group may send
// ahead: it returns the new run, or nothing if the id exists.
func createRead(clock any, p *store.RunCreateParams) *pgtx.Read {
	const columns = `id, workflow, status, input, owner, token, lease_until, last_seq, created_at, updated_at,
		parent_id, parent_position, parent_execution, trace_parent`
	return &pgtx.Read{
		SQL: `
			INSERT INTO reprise_run (` + columns + `)
			SELECT $2, $3, CASE WHEN $5 = '' THEN 'pending' ELSE 'running' END, $4::json, $5,
				CASE WHEN $5 = '' THEN 0 ELSE 1 END,
				CASE WHEN $5 = '' THEN NULL ELSE c.now + $6::interval END, 1, c.now, c.now, $7, $8, $9, $10
			FROM (SELECT coalesce($1::timestamptz, statement_timestamp()) AS now) c
			ON CONFLICT (id) DO NOTHING
			RETURNING ` + runColumns + `, token`,
		Args: []any{clock, p.ID, p.Workflow, nullJSON(p.Input), p.Owner, p.LeaseTTL, p.ParentID, p.ParentPosition, p.ParentExecution,
			p.TraceParent},
		Types: []string{"timestamptz", "text", "text", "text", "text", "interval", "text", "int", "int", "text"},
		// Rows in the order of the arrays: of an id given twice, the first
		// is inserted, and the row is the first's (DISTINCT ON).
		Set: `
			WITH c AS (SELECT statement_timestamp() AS now),
			q AS MATERIALIZED (
				SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::text[], $6::interval[],
					$7::text[], $8::int[], $9::int[], $10::text[]) WITH ORDINALITY
					AS q(at, id, workflow, input, owner, ttl, parent_id, parent_position, parent_execution, trace_parent, i)),
			inserted AS (
				INSERT INTO reprise_run (` + columns + `)
				SELECT id, workflow, CASE WHEN owner = '' THEN 'pending' ELSE 'running' END, input::json, owner,
					CASE WHEN owner = '' THEN 0 ELSE 1 END,
					CASE WHEN owner = '' THEN NULL ELSE coalesce(at, c.now) + ttl END, 1, coalesce(at, c.now),
					coalesce(at, c.now), parent_id, parent_position, parent_execution, trace_parent
				FROM q, c
				ORDER BY i
				ON CONFLICT (id) DO NOTHING
				RETURNING ` + runColumns + `, token)
			SELECT DISTINCT ON (inserted.id) q.i, inserted.*
			FROM inserted JOIN q ON q.id = inserted.id
			ORDER BY inserted.id, q.i`,
		Writes: true,
	}
}

// advanced brings a new run up to date with its first advance.
func advanced(run *store.Run, f *store.RunFinish, events []store.Event) {
	run.Status = store.RunRunning
	if f != nil {
		f.Apply(run)
	}
	if n := len(events); n > 0 {
		run.UpdatedAt = events[n-1].At
	}
}

// RunGet returns a run, or ErrNotFound.
func (s *Store) RunGet(ctx context.Context, id string) (*store.Run, error) {
	run, err := scanRun(s.pool.QueryRow(ctx, `SELECT `+runColumns+` FROM reprise_run WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("get run %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get run %q: %w", id, err)
	}
	return run, nil
}

// queueRun adds to tx's writes the read of run id as the writes before it
// leave it, into *run.
func queueRun(tx *pgtx.Tx, id string, run **store.Run) {
	tx.Queue(`SELECT `+runColumns+` FROM reprise_run WHERE id = $1`, id).QueryRow(func(row pgx.Row) error {
		var err error
		*run, err = scanRun(row)
		return err
	})
}

// queueRuns queues the read of locked runs into runs, in id order, after
// what the transaction queued before.
func queueRuns(tx *pgtx.Tx, locked []*lockedRun, runs *[]*store.Run) {
	if len(locked) == 0 {
		return
	}
	ids := make([]string, len(locked))
	for i, r := range locked {
		ids[i] = r.id
	}
	tx.Queue(`SELECT `+runColumns+` FROM reprise_run WHERE id = ANY($1) ORDER BY id`, ids).Query(func(rows pgx.Rows) error {
		var err error
		*runs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (*store.Run, error) { return scanRun(row) })
		return err
	})
}

// RunList lists runs newest first, filtered and paged by p.
func (s *Store) RunList(ctx context.Context, p *store.RunListParams) ([]*store.Run, error) {
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
	if !p.CreatedSince.IsZero() {
		filter("created_at >= $%d", p.CreatedSince)
	}
	if !p.CreatedUntil.IsZero() {
		filter("created_at < $%d", p.CreatedUntil)
	}
	if p.Retrying {
		where = append(where, "status = 'running'")
	}
	if p.Retrying || p.Step != "" || p.ErrorType != "" {
		// The runs with a failing step: the tasks with a failed attempt
		// (the small partial index reprise_task_failing) and, unless only
		// waiting ones count, the failed steps.
		var cond string
		if p.Step != "" {
			args = append(args, p.Step)
			cond += fmt.Sprintf(" AND step = $%d", len(args))
		}
		if p.ErrorType != "" {
			args = append(args, p.ErrorType)
			cond += fmt.Sprintf(" AND error_type = $%d", len(args))
		}
		failing := "SELECT run_id FROM reprise_task WHERE error_type IS NOT NULL" + cond
		if p.Retrying {
			failing += " AND owner = ''"
		} else {
			failing += " UNION ALL SELECT run_id FROM reprise_step_failed WHERE true" + cond
		}
		where = append(where, "id IN ("+failing+")")
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
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*store.Run, error) { return scanRun(row) })
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	return runs, nil
}

// StatsGet counts the retrying runs and the ready tasks by step.
func (s *Store) StatsGet(ctx context.Context) (*store.Stats, error) {
	stats := &store.Stats{Ready: map[string]int{}}
	err := s.pool.QueryRow(ctx, `
		SELECT count(DISTINCT run_id) FROM reprise_task WHERE error_type IS NOT NULL AND owner = ''`).
		Scan(&stats.Retrying)
	if err != nil {
		return nil, fmt.Errorf("get stats: %w", err)
	}
	rows, err := s.pool.Query(ctx, `
		SELECT step, count(*) FROM reprise_task
		WHERE owner = '' AND ready_at <= coalesce($1::timestamptz, statement_timestamp())
		GROUP BY step`, s.clock())
	if err == nil {
		var step string
		var n int
		_, err = pgx.ForEachRow(rows, []any{&step, &n}, func() error {
			stats.Ready[step] = n
			return nil
		})
	}
	if err != nil {
		return nil, fmt.Errorf("get stats: %w", err)
	}
	return stats, nil
}

// RunClaim leases up to p.Limit active runs that nobody holds or whose lease
// lapsed, oldest first. Each claim gives the run a new token.
func (s *Store) RunClaim(ctx context.Context, p *store.RunClaimParams) ([]store.RunLease, error) {
	if p.Owner == "" {
		return nil, errors.New("claim runs: owner is required")
	}
	if p.Limit <= 0 {
		return nil, nil
	}
	// Each candidate list is read from its partial index and locked as it
	// is read (SKIP LOCKED rechecks a row's conditions on its newest
	// version); the update then takes the oldest of both by key. A
	// semi-join of the table with the lists instead was planned, on a new
	// schema, as a loop that read the lists again for every active run.
	rows, err := s.pool.Query(ctx, claimRunsSQL, s.clock(), p.Owner, p.Workflows, p.Limit, p.LeaseTTL)
	if err != nil {
		return nil, fmt.Errorf("claim runs: %w", err)
	}
	leases, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.RunLease, error) {
		var l store.RunLease
		var err error
		l.Run, err = scanRun(row, &l.Token, &l.LastSeq)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim runs: %w", err)
	}
	slices.SortFunc(leases, func(a, b store.RunLease) int {
		if c := a.Run.CreatedAt.Compare(b.Run.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.Run.ID, b.Run.ID)
	})
	return leases, nil
}

// claimRunsSQL is RunClaim's statement: $1 the clock, $2 the owner, $3 the
// workflows (NULL: any), $4 the limit, $5 the lease.
const claimRunsSQL = `
		WITH c AS (SELECT coalesce($1::timestamptz, statement_timestamp()) AS now),
		unowned AS (
			SELECT id, created_at FROM reprise_run
			WHERE status IN ('pending', 'running') AND owner = ''
				AND ($3::text[] IS NULL OR workflow = ANY($3))
			ORDER BY created_at, id
			LIMIT $4
			FOR UPDATE SKIP LOCKED),
		lapsed AS (
			SELECT id, created_at FROM reprise_run
			WHERE status IN ('pending', 'running') AND owner <> ''
				AND lease_until <= coalesce($1::timestamptz, statement_timestamp())
				AND ($3::text[] IS NULL OR workflow = ANY($3))
			ORDER BY lease_until
			LIMIT $4
			FOR UPDATE SKIP LOCKED),
		picked AS (
			SELECT id AS picked_id FROM (SELECT * FROM unowned UNION ALL SELECT * FROM lapsed) x
			ORDER BY created_at, id
			LIMIT $4)
		UPDATE reprise_run r SET owner = $2, token = r.token + 1, lease_until = c.now + $5::interval,
			status = 'running'
		FROM picked, c
		WHERE r.id = picked.picked_id
		RETURNING ` + runColumns + `, token, last_seq`

// RunRenew sets the leases of the owner's active runs to lapse p.LeaseTTL
// from now. It refuses what RunRenewParams' Check refuses (no owner, a
// LeaseTTL of zero or less).
//
// An engine holds many runs (the benchmark's engine, its whole backlog),
// and a renewal that locked them all in one transaction held every run's
// lock for as long as it took to update them all (hundreds of
// milliseconds), and waited meanwhile for the transitions that held some:
// the transitions of every run waited for it in turn. So it reads the ids
// of the runs the owner holds, renews them in chunks that skip the rows
// other transactions hold, each a transaction of its own, and then renews
// the few it skipped, waiting for them (setLeases).
func (s *Store) RunRenew(ctx context.Context, p *store.RunRenewParams) error {
	if err := p.Check(); err != nil {
		return fmt.Errorf("renew run leases of %q: %w", p.Owner, err)
	}
	if _, err := s.setLeases(ctx, p.Owner, p.LeaseTTL); err != nil {
		return fmt.Errorf("renew run leases of %q: %w", p.Owner, err)
	}
	return nil
}

// RunRelease releases the leases of the owner's active runs, as RunRenew
// renews them (setLeases), and sends NoticeRunReady if it released any.
func (s *Store) RunRelease(ctx context.Context, p *store.RunReleaseParams) error {
	if err := p.Check(); err != nil {
		return fmt.Errorf("release run leases of %q: %w", p.Owner, err)
	}
	released, err := s.setLeases(ctx, p.Owner, 0)
	if err != nil {
		return fmt.Errorf("release run leases of %q: %w", p.Owner, err)
	}
	if released > 0 {
		// Released runs wait for another engine to claim them.
		s.publish(ctx, []Notice{{Kind: NoticeRunReady}})
	}
	return nil
}

// setLeases sets the leases of the owner's active runs to lapse ttl from
// now, or releases them for a ttl of zero, and returns how many it set:
// in chunks that skip the rows other transactions hold, then the rows it
// skipped, waiting for them.
func (s *Store) setLeases(ctx context.Context, owner string, ttl time.Duration) (int, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id FROM reprise_run WHERE owner = $1 AND status IN ('pending', 'running') ORDER BY id`, owner)
	if err != nil {
		return 0, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	set := 0
	var skipped []string
	for chunk := range slices.Chunk(ids, renewChunk) {
		done, err := s.renew(ctx, owner, ttl, chunk, true)
		if err != nil {
			return set, err
		}
		set += len(done)
		if len(done) < len(chunk) {
			// Held by another transaction, or no longer the owner's.
			skipped = append(skipped, without(chunk, done)...)
		}
	}
	if len(skipped) > 0 {
		// Rows are locked in id order, so that two renewals never
		// deadlock. A renewal that waits for a row lock longer than
		// renewLockTimeout gives way and is tried again: it may be in a
		// cycle with the end of a parent run (which locks the parent
		// first) or with a group of transitions, which would otherwise
		// wait for it (a group for its lockTimeout, a transition alone
		// for the server's deadlock_timeout).
		var done []string
		for try := 1; try == 1 || (try <= renewTries && (pgtx.RolledBack(err) || lockTimedOut(err))); try++ {
			done, err = s.renew(ctx, owner, ttl, skipped, false)
		}
		if err != nil {
			return set, err
		}
		set += len(done)
	}
	return set, nil
}

// renewChunk is how many runs a renewal's transaction renews at most,
// renewLockTimeout bounds each of its waits for a row lock, and
// renewTries is how often it is tried.
const (
	renewChunk       = 500
	renewLockTimeout = "50ms"
	renewTries       = 10
)

// lockTimedOut reports whether err is a wait for a lock that passed the
// transaction's lock_timeout.
func lockTimedOut(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// renew renews (or, for a ttl of zero, releases) those of the runs ids
// (in id order) that the owner still holds, in a transaction of its own,
// and returns their ids. With skip,
// it leaves the rows other transactions hold; without, it waits for them,
// each time for up to renewLockTimeout.
func (s *Store) renew(ctx context.Context, owner string, ttl time.Duration, ids []string, skip bool) ([]string, error) {
	lock := "FOR UPDATE"
	if skip {
		lock = "FOR UPDATE SKIP LOCKED"
	}
	var done []string
	err := s.committer.Once(ctx, func(tx *pgtx.Tx) error {
		done = nil
		if !skip {
			tx.Queue("SELECT set_config('lock_timeout', $1, true)", renewLockTimeout)
		}
		// Each run is looked up by key (a lateral subquery that locks is
		// never flattened into a join), in the order of ids.
		tx.Queue(`
			WITH c AS (SELECT coalesce($1::timestamptz, statement_timestamp()) AS now),
			held AS (
				SELECT x.id AS held_id FROM unnest($4::text[]) AS u(id) CROSS JOIN LATERAL (
					SELECT id FROM reprise_run
					WHERE id = u.id AND owner = $2 AND status IN ('pending', 'running')
					`+lock+`) x)
			UPDATE reprise_run r SET
				owner = CASE WHEN $3::interval > '0' THEN r.owner ELSE '' END,
				lease_until = CASE WHEN $3::interval > '0' THEN c.now + $3::interval END
			FROM held, c
			WHERE r.id = held.held_id
			RETURNING r.id`,
			s.clock(), owner, ttl, ids).Query(func(rows pgx.Rows) error {
			var err error
			done, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return done, nil
}

// without returns the ids of all that are not in some.
func without(all, some []string) []string {
	in := make(map[string]bool, len(some))
	for _, id := range some {
		in[id] = true
	}
	var rest []string
	for _, id := range all {
		if !in[id] {
			rest = append(rest, id)
		}
	}
	return rest
}

// A lockedRun is a run's row, read under its lock: what appending to its
// history, checking its lease and ending it need.
type lockedRun struct {
	*runHead
	token           int64
	status          store.RunStatus
	workflow        string
	parentID        string
	parentPosition  int
	parentExecution int
	hasChildren     bool
}

// lockedColumns are the columns scanLocked reads, in order.
const lockedColumns = `id, workflow, execution, last_seq, updated_at, owner, token, status,
	parent_id, parent_position, parent_execution, has_children`

// scanLocked reads lockedColumns and then extra.
func scanLocked(row pgx.Row, extra ...any) (*lockedRun, error) {
	sc := &lockedScan{}
	r := &sc.run
	r.runHead = &sc.head
	dest := append(sc.dest[:0], &r.id, &r.workflow, &r.execution, &r.lastSeq, &r.updatedAt, &r.owner, &r.token,
		&sc.status, &r.parentID, &r.parentPosition, &r.parentExecution, &r.hasChildren)
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return nil, err
	}
	r.status = store.RunStatus(sc.status)
	return r, nil
}

// lockedScan is what scanLocked allocates, in one piece.
type lockedScan struct {
	run    lockedRun
	head   runHead
	status string
	dest   [14]any
}

// lockRun locks a run's row for appending to its history and returns it
// with the store's time; a missing run is ErrNotFound. withParent also
// locks the run's parent, if it has one, and first: a transaction that
// locks several runs takes ancestors before descendants, so that the end
// of a child (which writes to its parent) and the end of its parent (which
// cancels the child) wait for each other instead of deadlocking.
func lockRun(ctx context.Context, tx *pgtx.Tx, clock any, id string, withParent bool) (run, parent *lockedRun, now time.Time, err error) {
	read := lockRunRead(clock, id, withParent)
	rows, err := tx.Query(ctx, read.SQL, read.Args...)
	if err != nil {
		return nil, nil, now, err
	}
	locked, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lockedRun, error) { return scanLocked(row, &now) })
	if err != nil {
		return nil, nil, now, err
	}
	for _, r := range locked {
		if err := tx.Own(r.id); err != nil {
			return nil, nil, now, err
		}
		if r.id == id {
			run = r
		} else {
			parent = r
		}
	}
	if tx.Ahead() && (run == nil || withParent && run.parentID != "" && parent == nil) {
		return nil, nil, now, pgtx.ErrStale // a row another transaction holds, skipped
	}
	if run == nil {
		return nil, nil, now, store.ErrNotFound
	}
	return run, parent, now.UTC(), nil
}

// lockRunRead is lockRun's read, which a group may send ahead.
func lockRunRead(clock any, id string, withParent bool) *pgtx.Read {
	query := `SELECT ` + lockedColumns + `, coalesce($1::timestamptz, statement_timestamp()) FROM reprise_run WHERE id = $2 FOR UPDATE`
	if withParent {
		// Two lookups by key, the parent's read (and locked) first; an
		// array of the two ids may be planned as a scan of the table
		// (see appender.queue). The run is read only with its parent,
		// so that a read ahead that skips a locked parent (SKIP LOCKED)
		// does not lock the child out of order.
		query = `
			WITH parent AS (
				SELECT ` + lockedColumns + `, coalesce($1::timestamptz, statement_timestamp()) FROM reprise_run
				WHERE id = (SELECT nullif(parent_id, '') FROM reprise_run WHERE id = $2)
				FOR UPDATE),
			run AS (
				SELECT ` + lockedColumns + `, coalesce($1::timestamptz, statement_timestamp()) FROM reprise_run
				WHERE id = $2 AND (parent_id = '' OR EXISTS (SELECT FROM parent)
					OR NOT EXISTS (SELECT FROM reprise_run p WHERE p.id = reprise_run.parent_id))
				FOR UPDATE)
			SELECT * FROM parent UNION ALL SELECT * FROM run`
	}
	return pgtx.NewRead(query, timestamptzText, clock, id)
}

// lockDescendants locks the active runs below root (its children, theirs,
// and so on), level by level. Each level is read after the one above is
// locked, so it sees every child those runs created: a run creates children
// only under its own lock.
func lockDescendants(ctx context.Context, tx *pgtx.Tx, root *lockedRun) ([]*lockedRun, error) {
	var (
		below []*lockedRun
		seen  = map[string]bool{root.id: true}
		level = []*lockedRun{root}
	)
	for {
		var parents []string
		for _, r := range level {
			if r.hasChildren {
				parents = append(parents, r.id)
			}
		}
		if len(parents) == 0 {
			return below, nil
		}
		rows, err := tx.Query(ctx, `
			SELECT `+lockedColumns+` FROM reprise_run
			WHERE parent_id = ANY($1) AND parent_id <> '' AND status IN ('pending', 'running')
			ORDER BY id
			FOR UPDATE`,
			parents)
		if err != nil {
			return nil, fmt.Errorf("lock child runs: %w", err)
		}
		next, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lockedRun, error) { return scanLocked(row) })
		if err != nil {
			return nil, fmt.Errorf("lock child runs: %w", err)
		}
		level = level[:0]
		for _, r := range next {
			if err := tx.Own(r.id); err != nil {
				return nil, err
			}
			if !seen[r.id] { // a run made its own ancestor through RunCreate
				seen[r.id] = true
				level = append(level, r)
				below = append(below, r)
			}
		}
	}
}
