package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"reprise"
)

// HistoryList returns a run's events with Seq above p.AfterSeq, in order.
//
// One statement, also when there are none, and shared with the reads that
// arrive together (reads.go): each run's row says whether it exists, and
// its last_seq whether there is anything to read (an engine polls waiting
// runs, and most polls find nothing new).
func (s *Store) HistoryList(ctx context.Context, p *reprise.HistoryListParams) ([]reprise.Event, error) {
	return s.readHistory(ctx, p)
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
// and the runs' new last_seq and updated_at.
type appender struct {
	now    time.Time
	events []reprise.Event

	runID     []string
	seq       []int64
	typ       []string
	execution []int32
	at        []time.Time
	data      []string

	heads []*runHead
}

func newAppender(now time.Time) *appender {
	return &appender{now: now}
}

// add appends e to h's history: it numbers the event, stamps it with the
// store's time (never before the run's previous event, so a history reads
// in time order even when transactions that started earlier commit later)
// and fills in the execution.
func (a *appender) add(h *runHead, e reprise.Event) error {
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
	data, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode %s event: %w", e.Type, err)
	}
	a.events = append(a.events, e)
	a.runID = append(a.runID, h.id)
	a.seq = append(a.seq, e.Seq)
	a.typ = append(a.typ, string(e.Type))
	a.execution = append(a.execution, int32(e.Execution))
	a.at = append(a.at, e.At)
	a.data = append(a.data, string(data))
	return nil
}

// queue adds to b the statements that store the events and advance the
// runs' heads, but for those in updated: the caller's own update of those
// rows sets their last_seq and updated_at.
//
// Each head is its own UPDATE by primary key. A join of the table with an
// array of ids would do it in one statement, but its plan is cached per
// connection (plan_cache_mode, in poolConfig), and a plan made while the
// table was small scans the whole table: on a new schema every append
// then costs a sequential scan of reprise_run for the connection's life.
// A lookup by the key is planned as an index scan whatever the table's
// size, and in the pipeline it costs no extra round trip.
func (a *appender) queue(b *pgx.Batch, updated ...*runHead) {
	if len(a.events) == 0 {
		return
	}
	var rest []*runHead
	for _, h := range a.heads {
		if !slices.Contains(updated, h) {
			rest = append(rest, h)
		}
	}
	if len(rest) == 0 {
		a.queueEvents(b)
		return
	}
	// The first head is advanced in the statement that inserts the events.
	h := rest[0]
	b.Queue(`
		WITH appended AS (`+insertEvents+`)
		UPDATE reprise_run SET last_seq = $8, updated_at = $9 WHERE id = $7`,
		a.runID, a.seq, a.typ, a.execution, a.at, a.data, h.id, h.lastSeq, h.updatedAt)
	for _, h := range rest[1:] {
		b.Queue(`UPDATE reprise_run SET last_seq = $2, updated_at = $3 WHERE id = $1`, h.id, h.lastSeq, h.updatedAt)
	}
}

// queueEvents adds to b the statement that stores the events, for a caller
// that updates the runs' heads itself.
func (a *appender) queueEvents(b *pgx.Batch) {
	if len(a.events) == 0 {
		return
	}
	markMergeable(b.Queue(insertEvents, a.runID, a.seq, a.typ, a.execution, a.at, a.data))
}

// queueWith adds to b one statement that stores the events and runs final,
// whose parameters are args, numbered from $7, and returns it (for rows
// final returns). final may open with more common table expressions
// (", name AS (...)"); it advances the heads of the runs in updated itself
// (advanceHead does it for one), and the others' are advanced as queue
// does. One statement instead of several: each costs the server more to
// start than these small writes cost to run.
func (a *appender) queueWith(b *pgx.Batch, updated []*runHead, final string, args ...any) *pgx.QueuedQuery {
	qq := b.Queue(`WITH appended AS (`+insertEvents+`)`+final,
		append([]any{a.runID, a.seq, a.typ, a.execution, a.at, a.data}, args...)...)
	for _, h := range a.heads {
		if !slices.Contains(updated, h) {
			b.Queue(`UPDATE reprise_run SET last_seq = $2, updated_at = $3 WHERE id = $1`, h.id, h.lastSeq, h.updatedAt)
		}
	}
	return qq
}

// advanceHeads opens the final statement of appender.queueWith with the
// update of runs' heads, whose parameters (headsArgs, arrays) are $7 to
// $9; the rest of the statement's are numbered from $10. A statement whose
// parameters are all arrays may be merged (merge.go).
const advanceHeads = `, head AS (
	UPDATE reprise_run r SET last_seq = h.last_seq, updated_at = h.updated_at
	FROM unnest($7::text[], $8::bigint[], $9::timestamptz[]) AS h(id, last_seq, updated_at)
	WHERE r.id = h.id)`

// headsArgs are advanceHeads' parameters for one run.
func headsArgs(h *runHead) []any {
	return []any{[]string{h.id}, []int64{h.lastSeq}, []time.Time{h.updatedAt}}
}

// insertEvents stores an appender's events.
const insertEvents = `
	INSERT INTO reprise_event (run_id, seq, type, execution, at, data)
	SELECT run_id, seq, type, execution, at, data::json
	FROM unnest($1::text[], $2::bigint[], $3::text[], $4::int[], $5::timestamptz[], $6::text[])
		AS e(run_id, seq, type, execution, at, data)`

// eventsOf returns the events a added for h.
func (a *appender) eventsOf(h *runHead) []reprise.Event {
	var es []reprise.Event
	for i, id := range a.runID {
		if id == h.id {
			es = append(es, a.events[i])
		}
	}
	return es
}
