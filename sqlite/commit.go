package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"reprise"
)

// errClosed is returned by calls made after Close.
var errClosed = errors.New("sqlite: store is closed")

// A committer runs write calls on the one write connection, batching the
// calls that arrive together into one transaction: group commit. The cost
// of a commit (a WAL fsync under synchronous=FULL) is paid once per batch
// instead of once per call.
//
// There is no writer goroutine. The first caller to find the committer idle
// becomes the leader: it takes every queued call, runs them in one
// transaction, commits, hands each caller its result, and passes the lead to
// the oldest call queued meanwhile. Callers that arrive while a batch runs
// queue up and wait.
//
// A call must leave the database unchanged when it returns a sentinel error
// (reprise.ErrNotFound, ErrLeaseLost, ErrRunFinished); its batch then
// carries on. Any other error may come after partial writes: the batch is
// rolled back and each of its calls is run again alone, in its own
// transaction, so that one bad call never costs the others their work.
type committer struct {
	conn *sql.Conn
	now  func() time.Time

	mu     sync.Mutex
	queue  []*call
	busy   bool // a leader is running a batch
	closed bool
	idle   *sync.Cond // signalled when busy turns false

	stmts map[string]*sql.Stmt // owned by the leader of the moment
}

// A call is one store method's transaction body, waiting for its batch.
type call struct {
	ctx    context.Context
	fn     func(*wtx) error
	wake   chan error // errLead, then the call's result
	leader bool       // handed the lead; may no longer leave the queue
}

// errLead tells a queued caller that it leads the next batch.
var errLead = errors.New("lead the next batch")

func newCommitter(conn *sql.Conn, now func() time.Time) *committer {
	c := &committer{conn: conn, now: now, stmts: map[string]*sql.Stmt{}}
	c.idle = sync.NewCond(&c.mu)
	return c
}

// do runs fn in a write transaction, shared with the calls that arrive
// together with it, and returns fn's error once that transaction has
// committed. If ctx ends while the call waits to start, do returns the
// context's error and fn never runs.
func (c *committer) do(ctx context.Context, fn func(*wtx) error) error {
	cl := &call{ctx: ctx, fn: fn, wake: make(chan error, 1)}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errClosed
	}
	c.queue = append(c.queue, cl)
	lead := !c.busy
	c.busy = true
	c.mu.Unlock()

	if !lead {
		var err error
		select {
		case err = <-cl.wake:
		case <-ctx.Done():
			if c.leave(cl) {
				return context.Cause(ctx)
			}
			err = <-cl.wake
		}
		if err != errLead {
			return err
		}
	}
	c.lead()
	return <-cl.wake
}

// leave takes a waiting call out of the queue, unless a leader took it or
// it was handed the lead.
func (c *committer) leave(cl *call) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.queue, cl)
	if i < 0 || cl.leader {
		return false
	}
	c.queue = slices.Delete(c.queue, i, i+1)
	return true
}

// lead runs one batch: every call queued now. Then it hands the lead to the
// oldest call that queued meanwhile, or marks the committer idle.
func (c *committer) lead() {
	c.mu.Lock()
	batch := c.queue
	c.queue = nil
	c.mu.Unlock()

	c.run(batch)

	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 {
		c.busy = false
		c.idle.Broadcast()
		return
	}
	next := c.queue[0]
	next.leader = true
	next.wake <- errLead
}

// run runs a batch in one transaction and delivers each call's result.
func (c *committer) run(batch []*call) {
	tx := &wtx{c: c, now: c.now().UTC()}
	tx.nanos = tx.now.UnixNano()
	results := make([]error, len(batch))
	err := c.runBatch(tx, batch, results)
	if err != nil && !errors.Is(err, errDirty) {
		// BEGIN or COMMIT failed: nothing of the batch is in.
		for i := range results {
			results[i] = err
		}
	}
	if errors.Is(err, errDirty) {
		for i, cl := range batch {
			results[i] = c.runAlone(tx, cl)
		}
	}
	for i, cl := range batch {
		cl.wake <- results[i]
	}
}

// errDirty reports that a call failed after it may have written.
var errDirty = errors.New("a call failed after writing")

// runBatch runs the calls in one transaction. It returns errDirty, having
// rolled back, if a call failed with an error other than a sentinel.
func (c *committer) runBatch(tx *wtx, batch []*call, results []error) error {
	tx.ctx = context.WithoutCancel(batch[0].ctx)
	if err := tx.begin(); err != nil {
		return err
	}
	for i, cl := range batch {
		if err := cl.ctx.Err(); err != nil {
			results[i] = context.Cause(cl.ctx)
			continue
		}
		tx.ctx = context.WithoutCancel(cl.ctx)
		err := cl.fn(tx)
		if err != nil && !clean(err) {
			tx.rollback()
			return errDirty
		}
		results[i] = err
	}
	return tx.commit()
}

// runAlone runs one call in its own transaction.
func (c *committer) runAlone(tx *wtx, cl *call) error {
	if err := cl.ctx.Err(); err != nil {
		return context.Cause(cl.ctx)
	}
	tx.ctx = context.WithoutCancel(cl.ctx)
	if err := tx.begin(); err != nil {
		return err
	}
	if err := cl.fn(tx); err != nil {
		tx.rollback()
		return err
	}
	return tx.commit()
}

// clean reports whether err is one that a call returns only before it
// writes anything.
func clean(err error) bool {
	return errors.Is(err, reprise.ErrNotFound) ||
		errors.Is(err, reprise.ErrLeaseLost) ||
		errors.Is(err, reprise.ErrRunFinished)
}

// close refuses new calls and waits for the running batch and the queued
// calls to finish.
func (c *committer) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for c.busy {
		c.idle.Wait()
	}
	for _, st := range c.stmts {
		st.Close()
	}
}

// A wtx is the write transaction of a batch, as its calls see it.
type wtx struct {
	c     *committer
	ctx   context.Context // the running call's, without its cancellation
	now   time.Time       // the batch's time, in UTC
	nanos int64           // now as Unix nanoseconds
}

func (tx *wtx) begin() error {
	if _, err := tx.c.conn.ExecContext(tx.ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	return nil
}

func (tx *wtx) commit() error {
	if _, err := tx.c.conn.ExecContext(tx.ctx, "COMMIT"); err != nil {
		tx.rollback()
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// rollback ends the transaction. Its error is of no use: the connection
// either has no transaction left or is broken, and the next BEGIN says so.
func (tx *wtx) rollback() {
	_, _ = tx.c.conn.ExecContext(tx.ctx, "ROLLBACK")
}

// stmt returns the prepared statement for query, preparing it once.
func (tx *wtx) stmt(query string) (*sql.Stmt, error) {
	if st, ok := tx.c.stmts[query]; ok {
		return st, nil
	}
	st, err := tx.c.conn.PrepareContext(tx.ctx, query)
	if err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	tx.c.stmts[query] = st
	return st, nil
}

func (tx *wtx) ExecContext(_ context.Context, query string, args ...any) (sql.Result, error) {
	st, err := tx.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(tx.ctx, args...)
}

func (tx *wtx) QueryContext(_ context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := tx.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(tx.ctx, args...)
}

func (tx *wtx) QueryRowContext(_ context.Context, query string, args ...any) *sql.Row {
	st, err := tx.stmt(query)
	if err != nil {
		// A Row carries its error to Scan; a failed Stmt gives none, so
		// query the connection and let it fail the same way.
		return tx.c.conn.QueryRowContext(tx.ctx, query, args...)
	}
	return st.QueryRowContext(tx.ctx, args...)
}
