package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A txn is one transition as its store method sees it. It reads with Query
// and QueryRow, and collects its writes in a batch and its notices in an
// outbox. The transaction it runs in (a conversation) may be its own or
// shared with other transitions (commit.go); either way, whatever was
// queued for the server before it (BEGIN, the writes of the transitions
// before it) travels with its first read, and its writes travel with the
// next read or with COMMIT. A transition alone costs two round trips: read
// and lock, then write and commit.
type txn struct {
	c      *conversation
	writes pgx.Batch
	out    outbox

	first []*aheadRows // the rows of the reads it declared, read ahead (see ahead.go)
	ahead bool         // the last read was served from first
}

// A conversation is one transaction on one connection: the statements
// queued to be sent with the next read, and the context that all of them
// run with.
type conversation struct {
	ctx    context.Context
	conn   *pgxpool.Conn
	queued []*pgx.QueuedQuery   // BEGIN and the like
	chains [][]*pgx.QueuedQuery // the writes of transitions, each in order (merge.go)
	owners map[string]*txn      // of a shared transaction: each run's first holder (txn.own)
	merged *atomic.Int64        // counts the statements merged, if not nil
}

// alone runs fn in a transaction of its own and, when fn returns nil, sends
// its writes and commits; then it publishes fn's notices. On an error the
// transaction is rolled back and nothing is published.
//
// When the connection breaks before COMMIT is sent (a server restart, a
// pooled connection that died while idle), or the server rolls the
// transaction back to break a deadlock, nothing was committed, so alone
// runs fn again, up to three times in all. A break after COMMIT was sent
// is returned as it is: the transition may or may not have committed,
// which the caller learns from the run's state.
func (s *Store) alone(ctx context.Context, fn func(*txn) error) error {
	for try := 1; ; try++ {
		retry, err := s.try(ctx, fn)
		if !retry || try == 3 || ctx.Err() != nil {
			return err
		}
		s.log.Debug("postgres transaction not committed; trying it again", "err", err)
	}
}

// try is one try of alone. retry reports that nothing was committed and
// fn may run again.
func (s *Store) try(ctx context.Context, fn func(*txn) error) (retry bool, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	// A connection left inside a transaction is closed, not reused.
	defer conn.Release()
	t := &txn{c: &conversation{ctx: ctx, conn: conn, queued: []*pgx.QueuedQuery{{SQL: "BEGIN"}}}}
	if err = fn(t); err != nil {
		return conn.Conn().IsClosed() || rolledBack(err), s.abort(ctx, conn, err)
	}
	t.c.queue(&t.writes)
	if err = t.c.commit(); err != nil {
		return pgconn.SafeToRetry(err) || rolledBack(err), s.abort(ctx, conn, err)
	}
	s.publish(t.out)
	return false, nil
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

// rolledBack reports whether err is the server aborting the transaction
// to break a deadlock (or a serialization failure): nothing was committed,
// and running it again will likely succeed. A deadlock can form between a
// transaction that locks a parent run and then its children (ending a run)
// and RunRenew, which locks an owner's runs in id order.
func rolledBack(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001")
}

// abort rolls back the transaction conn is in, if it is in one, and
// returns err.
func (s *Store) abort(ctx context.Context, conn *pgxpool.Conn, err error) error {
	if !conn.Conn().IsClosed() && conn.Conn().PgConn().TxStatus() != 'I' {
		rbCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, _ = conn.Exec(rbCtx, "ROLLBACK")
		cancel()
	}
	return err
}

// Query runs a read in the transaction, after the statements queued before
// it. It runs with the conversation's context: ctx is there to read like
// pgx.
func (t *txn) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
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

// result reads the result of the queued statement qq from br, calling the
// function registered for it, if any.
func result(br pgx.BatchResults, qq *pgx.QueuedQuery) error {
	if qq.Fn != nil {
		return qq.Fn(br)
	}
	_, err := br.Exec()
	return err
}

// QueryRow is Query for one row; no row is pgx.ErrNoRows.
func (t *txn) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := t.Query(ctx, sql, args...)
	return &firstRow{rows: rows, err: err}
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
