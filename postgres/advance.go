package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"reprise/internal/eventrow"
	"reprise/postgres/internal/pgtx"
	"reprise/store"
)

// RunAdvance records what a workflow did since its last advance: the steps,
// timers, version markers and child runs it started, in position order,
// the steps it no longer waits for, and its end or its continuation as a
// new execution when p.Finish is set.
func (s *Store) RunAdvance(ctx context.Context, p *store.RunAdvanceParams) (*store.Advanced, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("advance run %q: %w", p.RunID, err)
	}
	var adv *store.Advanced
	ending := p.Finish != nil && !p.Finish.ContinueAsNew
	// The run's lock, then the handed results' tasks (completeAll).
	reads := []*pgtx.Read{lockRunRead(s.clock(), p.RunID, ending)}
	for _, c := range p.Completed {
		reads = append(reads, completedRead(c.TaskID, p.RunID))
	}
	err := s.committer.RunOwning(ctx, reads, func(tx *pgtx.Tx) (err error) {
		adv, err = s.advance(ctx, tx, p, nil, time.Time{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("advance run %q: %w", p.RunID, err)
	}
	return adv, nil
}

// advance records an advance, checked by its Check, in tx. created,
// if not nil, is the run as the transaction created it at now, without a
// parent: it is locked already, and not read again.
func (s *Store) advance(ctx context.Context, tx *pgtx.Tx, p *store.RunAdvanceParams, created *lockedRun, now time.Time) (*store.Advanced, error) {
	ending := p.Finish != nil && !p.Finish.ContinueAsNew
	run, parent := created, (*lockedRun)(nil)
	if run == nil {
		var err error
		if run, parent, now, err = lockRun(ctx, tx, s.clock(), p.RunID, ending); err != nil {
			return nil, err
		}
	}
	if run.status.Final() {
		return nil, store.ErrRunFinished
	}
	if run.token != p.Token {
		return nil, store.ErrLeaseLost
	}
	a := newAppender(now)
	if err := completeAll(ctx, tx, a, run, p.Completed, now, p.Finish != nil); err != nil {
		return nil, err
	}
	dropped, err := dropCancelled(ctx, tx, run, p.Cancels)
	if err != nil {
		return nil, err
	}
	var below []*lockedRun
	if p.Finish != nil {
		if below, err = lockDescendants(ctx, tx, run); err != nil {
			return nil, err
		}
	}

	sc := &scheduler{a: a, tx: tx, run: run, p: p, dropped: dropped}
	if err := sc.schedule(); err != nil {
		return nil, err
	}
	if err := sc.cancel(); err != nil {
		return nil, err
	}
	adv := &store.Advanced{Tasks: sc.leased}
	switch {
	case p.Finish == nil:
		sc.tasks.queueWith(tx, a, run.runHead, sc.children, sc.leased)
	case p.Finish.ContinueAsNew:
		if err := cancelBelow(a, tx, run, below, false); err != nil {
			return nil, err
		}
		if err := continueAsNew(a, tx, run, p.Finish); err != nil {
			return nil, err
		}
		a.queue(tx, run.runHead)
	default:
		final, args, err := finish(a, run, p.Finish)
		if err != nil {
			return nil, err
		}
		if err := cancelBelow(a, tx, run, below, false); err != nil {
			return nil, err
		}
		if adv.Parent, err = reportToParent(a, tx, run, parent, p.Finish.Status, p.Finish.Output, p.Finish.Error); err != nil {
			return nil, err
		}
		// No NoticeOutcome for the run itself: only its owner advances it,
		// and an engine hears only of its own runs, so the one engine a
		// notice would reach is the caller, which knows. (A cancel, which
		// anyone may make, tells the owner.)
		a.queueWith(tx, []*runHead{run.runHead}, final, args...)
	}
	queueRuns(tx, below, &adv.Descendants)
	adv.Events = a.eventsOf(run.runHead)
	return adv, nil
}

// completeAll records results handed to the workflow before the advance
// that reports them, as TaskComplete would: StepCompleted for each, and
// the task removed (unless the advance drops all the run's tasks anyway,
// ending its execution). Every attempt's lease must hold at now; a stale
// one fails the advance with ErrLeaseLost before anything is written.
func completeAll(ctx context.Context, tx *pgtx.Tx, a *appender, run *lockedRun, results []store.TaskCompleteParams, now time.Time, dropping bool) error {
	for i := range results {
		c := &results[i]
		var (
			execution, position, attempt int
			step, owner                  string
			token                        int64
			lease                        *time.Time
		)
		read := completedRead(c.TaskID, run.id)
		err := tx.QueryRow(ctx, read.SQL, read.Args...).Scan(&execution, &position, &step, &attempt, &token, &owner, &lease)
		if errors.Is(err, pgx.ErrNoRows) {
			if tx.Ahead() { // or locked by another transaction
				return pgtx.ErrStale
			}
			return store.ErrLeaseLost
		}
		if err != nil {
			return err
		}
		if token != c.Token || owner == "" || lease == nil || !lease.After(now) {
			return store.ErrLeaseLost
		}
		t := store.Task{Execution: execution, Position: position, Step: step,
			Attempt: max(attempt, c.Attempt)} // the row's may be behind (startNext)
		if err := a.add(run.runHead, c.Completed(&t)); err != nil {
			return err
		}
		if !dropping {
			tx.Queue(`DELETE FROM reprise_task WHERE id = $1`, c.TaskID)
		}
	}
	return nil
}

// completedRead is completeAll's read of a handed result's task, which a
// group may send ahead. Like lockTask's read of a task, it takes no lock
// of the task: it runs after the statement that locked the run.
func completedRead(taskID int64, runID string) *pgtx.Read {
	return pgtx.NewRead(`
		SELECT execution, position, step, attempt, token, owner, lease_until FROM reprise_task
		WHERE id = $1 AND run_id = $2`,
		bigintText, taskID, runID)
}

// The SQL types of reads ahead's arguments.
var (
	bigint          = []string{"bigint"}
	bigintText      = []string{"bigint", "text"}
	timestamptzText = []string{"timestamptz", "text"}
	timestamptzInt8 = []string{"timestamptz", "bigint"}
)

// dropCancelled deletes the run's tasks at the positions of cancels, in
// its current execution, and returns the step names of those it found by
// position. The timers at those positions are deleted with the writes.
func dropCancelled(ctx context.Context, tx *pgtx.Tx, run *lockedRun, cancels []int) (map[int]string, error) {
	if len(cancels) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, `
		DELETE FROM reprise_task WHERE run_id = $1 AND execution = $2 AND position = ANY($3)
		RETURNING position, step`,
		run.id, run.execution, int32s(cancels))
	if err != nil {
		return nil, fmt.Errorf("drop cancelled steps: %w", err)
	}
	dropped := map[int]string{}
	var (
		pos  int
		step string
	)
	_, err = pgx.ForEachRow(rows, []any{&pos, &step}, func() error {
		dropped[pos] = step
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("drop cancelled steps: %w", err)
	}
	tx.Queue(`DELETE FROM reprise_timer WHERE run_id = $1 AND execution = $2 AND position = ANY($3)`,
		run.id, run.execution, int32s(cancels))
	return dropped, nil
}

func int32s(v []int) []int32 {
	out := make([]int32, len(v))
	for i, n := range v {
		out[i] = int32(n)
	}
	return out
}

// A scheduler appends what one advance started and queues the rows that
// start it.
type scheduler struct {
	a   *appender
	tx  *pgtx.Tx
	run *lockedRun
	p   *store.RunAdvanceParams
	// dropped are the tasks the advance's cancels deleted, by position.
	dropped map[int]string

	leased   []*store.Task
	tasks    taskRows // inserted with the run's update (see advance)
	children bool     // child runs were created
}

// schedule appends the events of the advance's plan (Plan) in position
// order, queues the timers and child runs it makes, and collects its
// tasks in sc.tasks.
func (sc *scheduler) schedule() error {
	p := sc.p
	plan := p.Plan()
	p.Stamp(plan, sc.run.execution, store.Now{At: sc.a.now, Precision: time.Microsecond})
	var (
		tasks    = &sc.tasks
		timers   timerRows
		kids     childRows
		notified = map[string]bool{}
	)
	a, h := sc.a, sc.run.runHead
	for i := range plan {
		s := &plan[i]
		if err := a.add(h, s.Event); err != nil {
			return err
		}
		switch {
		case s.Child != nil:
			status, events := p.ChildRun(s.Child)
			if err := kids.add(s.Child, status, events, a.now); err != nil {
				return err
			}
			if status == store.RunPending {
				sc.tx.Notify(Notice{Kind: NoticeRunReady, RunID: s.Child.ID, Workflow: s.Child.Workflow})
			}
		case !s.Make:
		case s.Task != nil:
			tasks.add(s.Step, s.Task.Owner, &s.Task.LeaseUntil)
			sc.leased = append(sc.leased, s.Task)
		case s.Step != nil:
			tasks.add(s.Step, "", nil)
			if !notified[s.Step.Name] {
				notified[s.Step.Name] = true
				sc.tx.Notify(Notice{Kind: NoticeTaskReady, Step: s.Step.Name, At: a.now})
			}
		case s.Timer != nil:
			timers.add(s.Timer.Position, s.Event.FireAt)
		}
	}
	timers.queue(sc.tx, h)
	sc.children = kids.queue(sc.tx, h, a.now)
	return nil
}

// cancel appends the advance's cancel requests (CancelRequests), for the
// tasks its cancels dropped and the steps it scheduled.
func (sc *scheduler) cancel() error {
	for _, e := range sc.p.CancelRequests(sc.dropped) {
		if err := sc.a.add(sc.run.runHead, e); err != nil {
			return err
		}
	}
	return nil
}

// taskRows are the tasks an advance inserts, as columns, and the columns
// of the statement's update of the run. It has room for the usual advance,
// of one step, and for the statement's arguments, which go in as pointers
// to the columns (see insertCols).
type taskRows struct {
	pos                      []int32
	step, input, key, policy []*string
	timeout                  []time.Duration
	owner                    []string
	leaseUntil               []*time.Time
	version                  []int32

	runs       []string // each task's run, execution and time
	executions []int32
	nows       []time.Time

	run       []string // the run's update: one run
	children  []bool
	lastSeq   []int64
	updatedAt []time.Time

	pos0                         [1]int32
	step0, input0, key0, policy0 [1]*string
	timeout0                     [1]time.Duration
	owner0, runs0                [1]string
	leaseUntil0                  [1]*time.Time
	version0                     [1]int32
	executions0                  [1]int32
	nows0                        [1]time.Time
	run0                         [1]string
	children0                    [1]bool
	lastSeq0                     [1]int64
	updatedAt0                   [1]time.Time
	args                         [16]any
}

// add adds a task for st, leased to owner until *until when owner is set.
// The name, key and lease are pointed to where st and the caller have
// them: the statement is encoded before the advance returns.
func (r *taskRows) add(st *store.StepSpec, owner string, until *time.Time) {
	if r.pos == nil {
		r.pos, r.step, r.input, r.key, r.policy = r.pos0[:0], r.step0[:0], r.input0[:0], r.key0[:0], r.policy0[:0]
		r.timeout, r.owner, r.leaseUntil, r.version = r.timeout0[:0], r.owner0[:0], r.leaseUntil0[:0], r.version0[:0]
	}
	r.pos = append(r.pos, int32(st.Position))
	r.step = append(r.step, &st.Name)
	r.input = append(r.input, jsonText(st.Input))
	r.key = append(r.key, &st.IdempotencyKey)
	r.policy = append(r.policy, jsonText(st.Policy))
	r.timeout = append(r.timeout, st.Timeout)
	r.owner = append(r.owner, owner)
	r.version = append(r.version, int32(st.StepVersion))
	r.leaseUntil = append(r.leaseUntil, until)
}

// queueWith queues, with the events of a (appender.queueWith), the
// insert of the tasks and the update that marks run h running, with its
// head, and has_children when the advance created child runs. A leased
// task starts its first attempt, as a claim would, and its id is set in
// leased (matched by run and position). The statement's parameters are
// arrays, and its rows say their run: the advances of several runs may go
// as one statement (Tx.QueueMergeable).
func (r *taskRows) queueWith(tx *pgtx.Tx, a *appender, h *runHead, children bool, leased []*store.Task) {
	r.run0[0], r.children0[0], r.lastSeq0[0], r.updatedAt0[0] = h.id, children, h.lastSeq, h.updatedAt
	r.run, r.children, r.lastSeq, r.updatedAt = r.run0[:], r.children0[:], r.lastSeq0[:], r.updatedAt0[:]
	args := append(r.args[:0], &r.run, &r.children, &r.lastSeq, &r.updatedAt)
	const running = `UPDATE reprise_run r SET status = 'running', has_children = r.has_children OR u.children,
		last_seq = u.last_seq, updated_at = u.updated_at
		FROM unnest($7::text[], $8::bool[], $9::bigint[], $10::timestamptz[]) AS u(id, children, last_seq, updated_at)
		WHERE r.id = u.id`
	if len(r.pos) == 0 {
		a.queueWith(tx, []*runHead{h}, running, args...)
		return
	}
	n := len(r.pos)
	r.runs, r.executions, r.nows = room(r.runs0[:], n), room(r.executions0[:], n), room(r.nows0[:], n)
	for i := range n {
		r.runs[i], r.executions[i], r.nows[i] = h.id, int32(h.execution), a.now
	}
	a.queueWith(tx, []*runHead{h}, `,
		tasks AS (
			INSERT INTO reprise_task (run_id, execution, position, step, input, idempotency_key, policy, timeout,
				owner, lease_until, attempt, token, started_at, first_started_at, ready_at, created_at, step_version)
			SELECT run_id, execution, position, step, input::json, key, policy::json, timeout,
				owner, lease_until, CASE WHEN owner = '' THEN 0 ELSE 1 END, CASE WHEN owner = '' THEN 0 ELSE 1 END,
				CASE WHEN owner = '' THEN NULL ELSE now END, CASE WHEN owner = '' THEN NULL ELSE now END, now, now,
				step_version
			FROM unnest($11::text[], $12::int[], $13::timestamptz[], $14::int[], $15::text[], $16::text[], $17::text[],
				$18::text[], $19::interval[], $20::text[], $21::timestamptz[], $22::int[])
				AS t(run_id, execution, now, position, step, input, key, policy, timeout, owner, lease_until, step_version)
			RETURNING run_id, id, position),
		run AS (`+running+`)
		SELECT run_id, id, position FROM tasks`,
		append(args, &r.runs, &r.executions, &r.nows, &r.pos, &r.step, &r.input, &r.key, &r.policy, &r.timeout, &r.owner,
			&r.leaseUntil, &r.version)...).Query(func(rows pgx.Rows) error {
		defer rows.Close()
		var (
			id  int64
			pos int
		)
		for rows.Next() {
			// Merged, the rows are those of every advance in the
			// statement: only this run's are scanned.
			if string(rows.RawValues()[0]) != h.id {
				continue
			}
			if err := rows.Scan(nil, &id, &pos); err != nil {
				return err
			}
			for _, t := range leased {
				if t.Position == pos {
					t.ID = id
				}
			}
		}
		return rows.Err()
	})
}

// timerRows are the timers an advance inserts, as columns.
type timerRows struct {
	pos  []int32
	fire []time.Time
}

func (r *timerRows) add(pos int, fire time.Time) {
	r.pos = append(r.pos, int32(pos))
	r.fire = append(r.fire, fire)
}

func (r *timerRows) queue(tx *pgtx.Tx, h *runHead) {
	if len(r.pos) == 0 {
		return
	}
	tx.Queue(`
		INSERT INTO reprise_timer (run_id, execution, position, fire_at)
		SELECT $1, $2, position, fire_at FROM unnest($3::int[], $4::timestamptz[]) AS t(position, fire_at)`,
		h.id, h.execution, r.pos, r.fire)
}

// childRows are the child runs an advance creates, as columns, with the
// events that open their histories.
type childRows struct {
	id, workflow, status []string
	traceParent          []string
	input                []*string
	pos                  []int32
	lastSeq              []int64
	seen                 map[string]bool

	eventRun  []string
	eventSeq  []int64
	eventType []string
	eventData []string
}

// add adds child run c, of status and with its first events (ChildRun),
// made at now.
func (r *childRows) add(c *store.ChildSpec, status store.RunStatus, events []store.Event, now time.Time) error {
	if r.seen[c.ID] {
		return nil
	}
	if r.seen == nil {
		r.seen = map[string]bool{}
	}
	r.seen[c.ID] = true
	bodies := make([][]byte, len(events))
	for i := range events {
		e := &events[i]
		e.Seq, e.At = int64(i+1), now
		var err error
		if bodies[i], err = eventrow.Body(*e); err != nil {
			return fmt.Errorf("child run %q: %w", c.ID, err)
		}
	}
	// One row, as an appender makes (package eventrow).
	last := events[len(events)-1]
	r.eventRun = append(r.eventRun, c.ID)
	r.eventSeq = append(r.eventSeq, last.Seq)
	r.eventType = append(r.eventType, string(last.Type))
	r.eventData = append(r.eventData, string(eventrow.Join(events, bodies)))
	r.id = append(r.id, c.ID)
	r.workflow = append(r.workflow, c.Workflow)
	r.status = append(r.status, string(status))
	r.traceParent = append(r.traceParent, c.TraceParent)
	r.input = append(r.input, jsonText(c.Input))
	r.pos = append(r.pos, int32(c.Position))
	r.lastSeq = append(r.lastSeq, int64(len(events)))
	return nil
}

// queue creates the child runs, unowned, with their first events; an id
// that exists already is left as it is. It reports whether there were
// any.
func (r *childRows) queue(tx *pgtx.Tx, h *runHead, now time.Time) bool {
	if len(r.id) == 0 {
		return false
	}
	tx.Queue(`
		WITH created AS (
			INSERT INTO reprise_run (id, workflow, status, input, last_seq, created_at, updated_at,
				parent_id, parent_position, parent_execution, trace_parent)
			SELECT id, workflow, status, input::json, last_seq, $1, $1, $2, position, $3, trace_parent
			FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::int[], $9::bigint[], $14::text[])
				AS c(id, workflow, status, input, position, last_seq, trace_parent)
			ON CONFLICT (id) DO NOTHING
			RETURNING id)
		INSERT INTO reprise_event (run_id, seq, type, execution, at, data)
		SELECT e.id, e.seq, e.type, 1, $1, e.data::json
		FROM created JOIN unnest($10::text[], $11::bigint[], $12::text[], $13::text[]) AS e(id, seq, type, data)
			ON e.id = created.id`,
		now, h.id, h.execution, r.id, r.workflow, r.status, r.input, r.pos, r.lastSeq,
		r.eventRun, r.eventSeq, r.eventType, r.eventData, r.traceParent)
	return true
}

// jsonText returns b for a text[] element cast to json: nil for NULL.
func jsonText(b json.RawMessage) *string {
	if len(b) == 0 {
		return nil
	}
	s := string(b)
	return &s
}
