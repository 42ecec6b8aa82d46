package sqlite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"reprise/store"
)

// errClosed is returned by calls made after Close.
var errClosed = errors.New("sqlite: store is closed")

// A committer runs write calls on the one write connection, batching the
// calls that arrive together into one transaction: group commit. The cost
// of a commit (a WAL fsync under synchronous=FULL) is paid once per batch
// instead of once per call.
//
// One writer goroutine runs the batches: it takes every queued call, runs
// them in one transaction, commits, and hands each caller its result; calls
// that arrive meanwhile wait for the next batch. A goroutine of its own,
// rather than whichever caller came first, keeps the deep stack SQLite's
// virtual machine needs grown once instead of growing a fresh goroutine's
// stack for every batch.
//
// A call must leave the database unchanged when it returns a sentinel error
// (reprise.ErrNotFound, ErrLeaseLost, ErrRunFinished, ErrNotRedrivable);
// its batch then carries on. Any other error may come after partial
// writes: the batch is rolled back and each of its calls is run again
// alone, in its own transaction, so that one bad call never costs the
// others their work.
type committer struct {
	conn *conn
	now  func() time.Time

	mu     sync.Mutex
	queue  []*call
	closed bool
	kick   chan struct{} // holds a token while calls may be queued
	done   chan struct{} // closed when the writer has stopped
}

// A call is one store method's transaction body, waiting for its batch.
type call struct {
	ctx  context.Context //nolint:containedctx // the waiting caller's, carried to the writer goroutine, which checks it before running fn
	fn   func(*txn) error
	wake chan error // the call's result
}

func newCommitter(conn *conn, now func() time.Time) *committer {
	c := &committer{conn: conn, now: now, kick: make(chan struct{}, 1), done: make(chan struct{})}
	go c.write()
	return c
}

// do runs fn in a write transaction, shared with the calls that arrive
// together with it, and returns fn's error once that transaction has
// committed. If ctx ends while the call waits to start, do returns the
// context's error and fn never runs.
func (c *committer) do(ctx context.Context, fn func(*txn) error) error {
	cl := &call{ctx: ctx, fn: fn, wake: make(chan error, 1)}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errClosed
	}
	c.queue = append(c.queue, cl)
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default: // the writer is already told
	}

	select {
	case err := <-cl.wake:
		return err
	case <-ctx.Done():
		if c.leave(cl) {
			return context.Cause(ctx)
		}
		return <-cl.wake
	}
}

// leave takes a waiting call out of the queue, unless the writer took it.
func (c *committer) leave(cl *call) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.queue, cl)
	if i < 0 {
		return false
	}
	c.queue = slices.Delete(c.queue, i, i+1)
	return true
}

// write is the writer goroutine: it runs batches until the committer is
// closed and its queue is empty.
func (c *committer) write() {
	defer close(c.done)
	for range c.kick {
		for {
			c.mu.Lock()
			batch, closed := c.queue, c.closed
			c.queue = nil
			c.mu.Unlock()
			if len(batch) == 0 {
				if closed {
					return
				}
				break
			}
			c.run(batch)
		}
	}
}

// run runs a batch in one transaction and delivers each call's result.
func (c *committer) run(batch []*call) {
	tx := &txn{c: c.conn, now: c.now().UTC()}
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
func (c *committer) runBatch(tx *txn, batch []*call, results []error) error {
	tx.ctx = context.WithoutCancel(batch[0].ctx)
	if err := tx.begin("IMMEDIATE"); err != nil {
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
func (c *committer) runAlone(tx *txn, cl *call) error {
	if err := cl.ctx.Err(); err != nil {
		return context.Cause(cl.ctx)
	}
	tx.ctx = context.WithoutCancel(cl.ctx)
	if err := tx.begin("IMMEDIATE"); err != nil {
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
	return errors.Is(err, store.ErrNotFound) ||
		errors.Is(err, store.ErrLeaseLost) ||
		errors.Is(err, store.ErrRunFinished) ||
		errors.Is(err, store.ErrNotRedrivable)
}

// close refuses new calls and waits for the queued calls to finish.
func (c *committer) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
	<-c.done
}

// A txn is a transaction on one connection as a store method sees it: the
// shared write transaction of a batch, or a read transaction.
type txn struct {
	c     *conn
	ctx   context.Context //nolint:containedctx // lives for one transaction, as sql.Tx's does; for a write, the running call's without its cancellation
	now   time.Time       // the store's time, in UTC: the batch's for a write
	nanos int64           // now as Unix nanoseconds
}

func (tx *txn) begin(mode string) error {
	if _, err := tx.c.exec(tx.ctx, "BEGIN "+mode); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	return nil
}

func (tx *txn) commit() error {
	if _, err := tx.c.exec(tx.ctx, "COMMIT"); err != nil {
		tx.rollback()
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// rollback ends the transaction. Its error is of no use: the connection
// either has no transaction left or is broken, and the next BEGIN says so.
func (tx *txn) rollback() {
	_, _ = tx.c.exec(tx.ctx, "ROLLBACK")
}

func (tx *txn) exec(query string, args ...any) (int64, error) {
	return tx.c.exec(tx.ctx, query, args...)
}

func (tx *txn) insert(query string, args ...any) (int64, error) {
	return tx.c.insert(tx.ctx, query, args...)
}

func (tx *txn) query(query string, args ...any) (*rows, error) {
	return tx.c.query(tx.ctx, query, args...)
}

func (tx *txn) queryRow(query string, args ...any) *row {
	return tx.c.queryRow(tx.ctx, query, args...)
}
