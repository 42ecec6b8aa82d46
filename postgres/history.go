package postgres

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"reprise/internal/eventrow"
	"reprise/postgres/internal/pgtx"
	"reprise/store"
)

// HistoryList returns a run's events with Seq above p.AfterSeq, in order.
//
// One statement, also when there are none, and shared with the reads that
// arrive together (reads.go): each run's row says whether it exists, and
// its last_seq whether there is anything to read (an engine polls waiting
// runs, and most polls find nothing new).
func (s *Store) HistoryList(ctx context.Context, p *store.HistoryListParams) ([]store.Event, error) {
	return s.readHistory(ctx, p)
}

// A querier is what a read needs of a pool or a transaction.
type querier interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}

// newestFirst hands found the events of a run's rows, newest row first,
// each row's in order, until found reports that it has what it looks for.
// A row may hold several events (package eventrow), so a search for the
// last event of a kind decodes rows from the end; the rows are read a few
// at a time, since what is looked for is most often in the newest.
func newestFirst(ctx context.Context, q querier, runID string, found func(events []store.Event) bool) error {
	const page = 8
	before := int64(math.MaxInt64)
	var events []store.Event
	for {
		rows, err := q.Query(ctx, `
			SELECT seq, execution, at, data FROM reprise_event
			WHERE run_id = $1 AND seq < $2
			ORDER BY seq DESC
			LIMIT $3`,
			runID, before, page)
		if err != nil {
			return err
		}
		n, done := 0, false
		for !done && rows.Next() {
			var (
				execution int
				at        time.Time
				data      []byte
			)
			if err := rows.Scan(&before, &execution, &at, &data); err != nil {
				rows.Close()
				return err
			}
			n++
			if events, err = eventrow.Decode(events[:0], before, execution, at.UTC(), data, 0); err != nil {
				rows.Close()
				return err
			}
			done = found(events)
		}
		rows.Close()
		if err := rows.Err(); err != nil || done || n < page {
			return err
		}
	}
}

// A runHead is what appending to a run's history needs to know, read under
// the run's row lock.
type runHead struct {
	id        string
	execution int
	lastSeq   int64
	updatedAt time.Time
	owner     string
}

// An appender collects events of one or more runs for one multi-row insert,
// and the runs' new last_seq and updated_at. The events a write appends to
// one run go in as one row (package eventrow): half the rows and index
// entries of one per event, as a retry's AttemptFailed and AttemptStarted,
// or a step's StepScheduled and AttemptStarted, share theirs.
type appender struct {
	now    time.Time
	events []store.Event
	rows   []eventRows // events[rows[i].first:][:len(rows[i].bodies)]
	heads  []*runHead

	// Room for the common write, two events of one run in one row (a
	// retry, a step leased as scheduled, a step's result with the run's
	// end), so that it allocates no more.
	events0 [2]store.Event
	rows0   [1]eventRows
	bodies0 [2][]byte
	heads0  [1]*runHead
}

// eventRows are the events of one row: consecutive events of one run, at
// one time.
type eventRows struct {
	head   *runHead
	first  int
	bodies [][]byte
}

func newAppender(now time.Time) *appender {
	a := &appender{now: now}
	a.events, a.rows, a.heads = a.events0[:0], a.rows0[:0], a.heads0[:0]
	return a
}

// add appends e to h's history: it numbers the event, stamps it with the
// store's time (never before the run's previous event, so a history reads
// in time order even when transactions that started earlier commit later)
// and fills in the execution.
func (a *appender) add(h *runHead, e store.Event) error {
	if len(a.heads) == 0 || a.heads[len(a.heads)-1] != h {
		a.heads = append(a.heads, h)
	}
	h.lastSeq++
	e.Seq = h.lastSeq
	e.At = a.now
	if e.At.Before(h.updatedAt) {
		e.At = h.updatedAt.UTC()
	}
	h.updatedAt = e.At
	if e.Execution == 0 {
		e.Execution = h.execution
	}
	// AppendJSON (in Body) is what MarshalJSON writes, without
	// encoding/json's reflection and its check of the result: a fifth of
	// the store's allocations, and of the garbage collector's work.
	body, err := eventrow.Body(e)
	if err != nil {
		return err
	}
	a.events = append(a.events, e)
	if n := len(a.rows); n > 0 {
		if r := &a.rows[n-1]; r.head == h && a.events[len(a.events)-2].Seq == e.Seq-1 && a.events[r.first].At.Equal(e.At) {
			r.bodies = append(r.bodies, body)
			return nil
		}
	}
	var bodies [][]byte
	if len(a.rows) == 0 {
		bodies = append(a.bodies0[:0], body)
	} else {
		bodies = [][]byte{body}
	}
	a.rows = append(a.rows, eventRows{head: h, first: len(a.events) - 1, bodies: bodies})
	return nil
}

// insertArgs returns the parameters $1 to $6 of insertEvents: a's rows,
// as arrays, with room for the parameters that follow them (append to it
// once: the appends share that room).
func (a *appender) insertArgs() []any {
	n := len(a.rows)
	c := &insertCols{}
	c.runID, c.seq, c.typ = room(c.runID0[:], n), room(c.seq0[:], n), room(c.typ0[:], n)
	c.execution, c.at, c.data = room(c.execution0[:], n), room(c.at0[:], n), room(c.data0[:], n)
	for i, r := range a.rows {
		events := a.events[r.first : r.first+len(r.bodies)]
		last := &events[len(events)-1]
		c.runID[i], c.seq[i], c.typ[i] = r.head.id, last.Seq, string(last.Type)
		c.execution[i], c.at[i] = int32(last.Execution), last.At
		c.data[i] = string(eventrow.Join(events, r.bodies))
	}
	c.args[0], c.args[1], c.args[2] = &c.runID, &c.seq, &c.typ
	c.args[3], c.args[4], c.args[5] = &c.execution, &c.at, &c.data
	return c.args[:6]
}

// insertCols are insertArgs' arrays, in one allocation with room for the
// usual row (a transition appends to one run) and for the parameters of
// the statement that follow. The arrays go in as pointers, which box
// without an allocation of their own (package pgtx takes them as the
// arrays).
type insertCols struct {
	runID, typ, data []string
	seq              []int64
	execution        []int32
	at               []time.Time
	args             [24]any

	runID0, typ0, data0 [1]string
	seq0                [1]int64
	execution0          [1]int32
	at0                 [1]time.Time
}

// room returns a slice of n elements, of buf if it is large enough.
func room[T any](buf []T, n int) []T {
	if n <= len(buf) {
		return buf[:n]
	}
	return make([]T, n)
}

// queue adds to tx's writes the statement that stores the events and
// advances the runs' heads, but for those in updated: the caller's own
// update of those rows sets their last_seq and updated_at. Its parameters
// are arrays: the appends of several transitions may go as one statement
// (Tx.QueueMergeable).
func (a *appender) queue(tx *pgtx.Tx, updated ...*runHead) {
	if len(a.events) == 0 {
		return
	}
	rest := a.rest(updated)
	if len(rest) == 0 {
		a.queueEvents(tx)
		return
	}
	tx.QueueMergeable(withEvents(advanceHeads+` SELECT`), append(a.insertArgs(), headsArgs(rest...)...)...)
}

// rest returns the heads of the runs a appends to, but for those in
// updated.
func (a *appender) rest(updated []*runHead) []*runHead {
	var rest []*runHead
	for _, h := range a.heads {
		if !slices.Contains(updated, h) {
			rest = append(rest, h)
		}
	}
	return rest
}

// queueEvents adds to tx's writes the statement that stores the events,
// for a caller that updates the runs' heads itself.
func (a *appender) queueEvents(tx *pgtx.Tx) {
	if len(a.events) == 0 {
		return
	}
	tx.QueueMergeable(insertEvents, a.insertArgs()...)
}

// queueWith adds to tx's writes one statement that stores the events and
// runs final, whose parameters are args, numbered from $7, and returns it
// (for rows final returns). final may open with more common table
// expressions (", name AS (...)"); it advances the heads of the runs in
// updated itself (advanceHeads does it), and the others' are advanced by a
// statement of their own. One statement instead of several: each costs
// the server more to start than these small writes cost to run. All its
// parameters are arrays, so the statement may be merged with those of
// other transitions (Tx.QueueMergeable).
func (a *appender) queueWith(tx *pgtx.Tx, updated []*runHead, final string, args ...any) *pgx.QueuedQuery {
	qq := tx.QueueMergeable(withEvents(final), append(a.insertArgs(), args...)...)
	if rest := a.rest(updated); len(rest) > 0 {
		tx.QueueMergeable(`
			UPDATE reprise_run r SET last_seq = h.last_seq, updated_at = h.updated_at
			FROM unnest($1::text[], $2::bigint[], $3::timestamptz[]) AS h(id, last_seq, updated_at)
			WHERE r.id = h.id`,
			headsArgs(rest...)...)
	}
	return qq
}

// withEvents returns the statement that inserts an appender's events and
// runs final. The texts are few, and each is made once, not once per
// transition (the statements are long, and transitions many).
func withEvents(final string) string {
	if v, ok := withEventsSQL.Load(final); ok {
		return v.(string)
	}
	v := `WITH appended AS (` + insertEvents + `)` + final
	withEventsSQL.Store(final, v)
	return v
}

var withEventsSQL sync.Map // final → statement

// advanceHeads opens the final statement of appender.queueWith with the
// update of runs' heads, whose parameters (headsArgs, arrays) are $7 to
// $9; the rest of the statement's are numbered from $10. A statement whose
// parameters are all arrays may be merged (Tx.QueueMergeable).
const advanceHeads = `, head AS (
	UPDATE reprise_run r SET last_seq = h.last_seq, updated_at = h.updated_at
	FROM unnest($7::text[], $8::bigint[], $9::timestamptz[]) AS h(id, last_seq, updated_at)
	WHERE r.id = h.id)`

// headsArgs are advanceHeads' parameters for the runs hs, with room for
// the parameters that follow them (as insertArgs').
func headsArgs(hs ...*runHead) []any {
	c := &headCols{}
	c.ids, c.seqs, c.ats = room(c.ids0[:], len(hs)), room(c.seqs0[:], len(hs)), room(c.ats0[:], len(hs))
	for i, h := range hs {
		c.ids[i], c.seqs[i], c.ats[i] = h.id, h.lastSeq, h.updatedAt
	}
	c.args[0], c.args[1], c.args[2] = &c.ids, &c.seqs, &c.ats
	return c.args[:3]
}

// headCols are headsArgs' arrays, as insertCols are insertArgs'.
type headCols struct {
	ids  []string
	seqs []int64
	ats  []time.Time
	args [12]any

	ids0  [1]string
	seqs0 [1]int64
	ats0  [1]time.Time
}

// insertEvents stores an appender's events.
const insertEvents = `
	INSERT INTO reprise_event (run_id, seq, type, execution, at, data)
	SELECT run_id, seq, type, execution, at, data::json
	FROM unnest($1::text[], $2::bigint[], $3::text[], $4::int[], $5::timestamptz[], $6::text[])
		AS e(run_id, seq, type, execution, at, data)`

// eventsOf returns the events a added for h.
func (a *appender) eventsOf(h *runHead) []store.Event {
	var es []store.Event
	for _, r := range a.rows {
		if r.head == h {
			es = append(es, a.events[r.first:r.first+len(r.bodies)]...)
		}
	}
	return es
}
