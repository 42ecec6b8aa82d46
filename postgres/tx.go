package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A txn is one transition's transaction. It reads with Query and QueryRow,
// and collects its writes in a batch and its notices in an outbox; BEGIN
// travels with the first read and COMMIT with the writes, so that a
// transition costs two round trips to the server: read and lock, then
// write and commit.
type txn struct {
	conn   *pgxpool.Conn
	begun  bool
	writes pgx.Batch
	out    outbox
}

// tx runs fn in a transaction and, when fn returns nil, sends its writes
// and commits; then it publishes fn's notices. On an error the transaction
// is rolled back and nothing is published.
//
// When the connection breaks before COMMIT is sent (a server restart, a
// pooled connection that died while idle), or the server rolls the
// transaction back to break a deadlock, nothing was committed, so tx runs
// fn again, up to three times in all. A break
// after COMMIT was sent is returned as it is: the transition may or may not
// have committed, which the caller learns from the run's state.
func (s *Store) tx(ctx context.Context, fn func(*txn) error) error {
	for try := 1; ; try++ {
		retry, err := s.try(ctx, fn)
		if !retry || try == 3 || ctx.Err() != nil {
			return err
		}
		s.log.Debug("postgres connection broke; trying the transaction again", "err", err)
	}
}

// try is one try of tx. retry reports that the connection broke before
// COMMIT was sent, so that fn may run again.
func (s *Store) try(ctx context.Context, fn func(*txn) error) (retry bool, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	// A connection left inside a transaction is closed, not reused.
	defer conn.Release()
	t := &txn{conn: conn}
	if err = fn(t); err == nil {
		if !t.begun {
			t.writes.QueuedQueries = append([]*pgx.QueuedQuery{{SQL: "BEGIN"}}, t.writes.QueuedQueries...)
		}
		t.writes.Queue("COMMIT")
		if err = conn.SendBatch(ctx, &t.writes).Close(); err != nil {
			return pgconn.SafeToRetry(err) || rolledBack(err), s.abort(ctx, conn, err)
		}
		s.publish(t.out)
		return false, nil
	}
	return conn.Conn().IsClosed() || rolledBack(err), s.abort(ctx, conn, err)
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

// Query runs a read in the transaction, beginning it if this is the first.
func (t *txn) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.begun {
		return t.conn.Query(ctx, sql, args...)
	}
	t.begun = true
	var b pgx.Batch
	b.Queue("BEGIN")
	b.Queue(sql, args...)
	br := t.conn.SendBatch(ctx, &b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, fmt.Errorf("begin: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// QueryRow is Query for one row; no row is pgx.ErrNoRows.
func (t *txn) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := t.Query(ctx, sql, args...)
	return &firstRow{rows: rows, err: err}
}

// batchRows are the rows of the first read; closing them ends the batch
// that carried BEGIN.
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
