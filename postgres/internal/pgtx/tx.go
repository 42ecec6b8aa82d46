package pgtx

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"reprise/store"
)

// A Tx is one transition as its store method sees it. It reads with Query
// and QueryRow, and collects its writes (Queue) and its notices (Notify)
// until its transaction commits. The transaction it runs in (a
// conversation) may be its own or shared with other transitions
// (Committer); either way, whatever was queued for the server before it
// (BEGIN, the writes of the transitions before it) travels with its first
// read, and its writes travel with the next read or with COMMIT. A
// transition alone costs two round trips: read and lock, then write and
// commit. On the plain path every statement is a round trip of its own,
// in a pgx.Tx (plain.go).
type Tx struct {
	c      *conversation // grouped path
	p      *plainTx      // plain path
	writes pgx.Batch
	out    []store.Notice

	first []*aheadRows // the rows of the reads it declared, read ahead (see ahead.go)
	ahead bool         // the last read was served from first
}

// A conversation is one transaction on one connection: the statements
// queued to be sent with the next read, and the context that all of them
// run with.
type conversation struct {
	ctx    context.Context //nolint:containedctx // the transaction's, which no caller's may cancel when it is shared
	conn   *pgxpool.Conn
	queued []*pgx.QueuedQuery   // BEGIN and the like
	chains [][]*pgx.QueuedQuery // the writes of transitions, each in order (merge.go)
	owners map[string]*Tx       // of a shared transaction: each run's first holder (Tx.Own)
	merged *atomic.Int64        // counts the statements merged, if not nil
}

// Query runs a read in the transaction, after the statements queued before
// it. It runs with the transaction's context: ctx is there to read like
// pgx.
func (t *Tx) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.p != nil {
		return t.p.query(sql, args...)
	}
	// The reads ahead serve the transition's reads in the order it
	// declared them, until one differs.
	t.ahead = len(t.first) > 0 && t.first[0] != nil && t.first[0].sql == sql
	if t.ahead {
		first := t.first[0]
		t.first = t.first[1:]
		return first, nil
	}
	t.first = nil
	c := t.c
	if len(c.queued) == 0 && len(c.chains) == 0 {
		return c.conn.Query(c.ctx, sql, args...)
	}
	b := &pgx.Batch{QueuedQueries: c.flush()}
	n := len(b.QueuedQueries)
	b.Queue(sql, args...)
	br := c.conn.SendBatch(c.ctx, b)
	for _, qq := range b.QueuedQueries[:n] {
		if err := result(br, qq); err != nil {
			br.Close()
			return nil, fmt.Errorf("queued statements: %w", err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// QueryRow is Query for one row; no row is pgx.ErrNoRows.
func (t *Tx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := t.Query(ctx, sql, args...)
	return &firstRow{rows: rows, err: err}
}

// Queue adds a write to the transition's writes, which are sent in order,
// with its next read or with COMMIT, and returns it, for a function that
// reads its rows (pgx.QueuedQuery's Query, QueryRow, Exec) when it has run.
func (t *Tx) Queue(sql string, args ...any) *pgx.QueuedQuery {
	return t.writes.Queue(sql, args...)
}

// QueueMergeable is Queue for a write that may go as one statement with
// the writes of the same text of other transitions of its group, their
// array arguments joined (merge.go). All its arguments are arrays (or
// pointers to arrays), each element of which writes on its own, so that
// the joined statement writes what they would have one after the other;
// and if it returns rows that the transition reads, each row says which
// transition's it is (a run's id), and the function reads only its own:
// it is handed the rows of all of them.
func (t *Tx) QueueMergeable(sql string, args ...any) *pgx.QueuedQuery {
	return markMergeable(t.Queue(sql, args...))
}

// Notify adds a notice to those published once the transition has
// committed.
func (t *Tx) Notify(n store.Notice) { t.out = append(t.out, n) }

// Ahead reports whether the last read was served from the reads ahead
// (Committer.RunOwning). A read ahead locks with SKIP LOCKED: one that
// found nothing, or not all it locks, may have skipped a row another
// transaction holds, and the transition should return ErrStale, to run
// again reading in turn, rather than report the row missing.
func (t *Tx) Ahead() bool { return t.ahead }

// Own records that the transition holds the locks of the runs ids (a
// transition of RunOwning records every run it locks). If its data came
// from a read ahead and a transition before it in the group holds one of
// them, it returns ErrStale, for the transition to return: it must run
// again.
func (t *Tx) Own(ids ...string) error {
	owners := t.c.ownersOf()
	if owners == nil { // a transaction of its own
		return nil
	}
	if t.ahead {
		for _, id := range ids {
			if o := owners[id]; o != nil && o != t {
				return ErrStale
			}
		}
	}
	for _, id := range ids {
		if id != "" {
			owners[id] = t
		}
	}
	return nil
}

// ownersOf returns the runs' first holders of a shared transaction, nil
// for c nil (the plain path) or a transaction of its own.
func (c *conversation) ownersOf() map[string]*Tx {
	if c == nil {
		return nil
	}
	return c.owners
}

// queue adds a transition's writes to what goes with the next read.
func (c *conversation) queue(b *pgx.Batch) {
	if len(b.QueuedQueries) > 0 {
		c.chains = append(c.chains, b.QueuedQueries)
	}
}

// commit sends what is queued, and COMMIT.
func (c *conversation) commit() error {
	b := &pgx.Batch{QueuedQueries: append(c.flush(), &pgx.QueuedQuery{SQL: "COMMIT"})}
	return c.conn.SendBatch(c.ctx, b).Close()
}

// count adds n to the count of merged statements.
func (c *conversation) count(n int) {
	if c.merged != nil && n > 0 {
		c.merged.Add(int64(n))
	}
}

// flush returns what is queued, to be sent, with the transitions' writes
// merged, and empties the queue.
func (c *conversation) flush() []*pgx.QueuedQuery {
	q := c.queued
	if len(c.chains) > 0 {
		writes, n := merge(c.chains)
		q = append(q, writes...)
		c.count(n)
	}
	c.queued, c.chains = nil, nil
	unboxAll(q)
	return q
}

// result reads the result of the queued statement qq from br, calling the
// function registered for it, if any.
func result(br pgx.BatchResults, qq *pgx.QueuedQuery) error {
	if qq.Fn != nil {
		return qq.Fn(br)
	}
	_, err := br.Exec()
	return err
}

// batchRows are the rows of a read sent with queued statements; closing
// them ends the batch.
type batchRows struct {
	pgx.Rows
	br  pgx.BatchResults
	err error
}

func (r *batchRows) Close() {
	r.Rows.Close()
	r.err = r.br.Close()
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// firstRow scans the first of rows.
type firstRow struct {
	rows pgx.Rows
	err  error
}

func (r *firstRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		r.rows.Close()
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}
