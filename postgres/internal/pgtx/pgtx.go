// Package pgtx runs the PostgreSQL store's transitions in transactions:
// those that arrive together in one shared transaction (group commit),
// their first reads sent ahead and their writes of the same text merged,
// or, on the plain path, each in a transaction of its own.
package pgtx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"reprise/store"
)

// Options configures a Committer.
type Options struct {
	// Writers is how many shared transactions run at once. Default: 1.
	Writers int
	// Plain runs every transition in a transaction of its own, one
	// statement at a time: BEGIN, its reads and writes in order, COMMIT.
	// No group, no reads ahead, no merged statements, and the arguments
	// go to pgx's codecs as they are. Default: false, grouped.
	Plain bool
	// Publish is handed the notices of each committed transaction, with
	// the context of the transaction's call (or of its group's first).
	// Default: nil, they are dropped.
	Publish func(context.Context, []store.Notice)
	// Logger receives the debug lines of groups run again alone and of
	// transactions tried again. Default: nil, silent.
	Logger *slog.Logger
}

// A Committer runs transitions, each a function that reads with Tx.Query
// and Tx.QueryRow, queues its writes with Tx.Queue and its notices with
// Tx.Notify.
//
// On the grouped path (the default) it runs them in shared transactions:
// group commit. A transition alone is a transaction of its own, with a
// BEGIN, a COMMIT and a WAL flush, two round trips and a connection for
// the whole time; most of what the server spends on a small transition is
// that. The transitions that arrive together instead run one after the
// other in one transaction on one connection, each one's writes sent with
// the next one's read, and share one COMMIT: n transitions cost n+1 round
// trips and one flush, and two when they declare their first reads (see
// ahead.go).
//
// There is no committer goroutine (see Batcher). A caller that finds fewer
// than Options.Writers groups running leads one: it takes every queued
// transition (up to maxGroup), runs them, commits, hands each caller its
// result, and passes the lead to the oldest transition queued meanwhile.
// The others wait in the queue.
//
// A transition that returns a sentinel error (store.ErrNotFound,
// ErrLeaseLost, ErrRunFinished, ErrNotRedrivable) has changed nothing, by
// the Store contract: it may have locked rows, which the group then holds
// until its commit, and its group carries on. Any other error, or a
// connection that breaks before COMMIT is sent, means nothing of the group
// was committed: each of its transitions then runs again alone (Alone,
// which also tries again after a deadlock), so that one bad transition
// never costs the others their work. A break after COMMIT was sent is
// every transition's error, as it is for a transition alone.
type Committer struct {
	pool    *pgxpool.Pool
	plain   bool
	publish func(context.Context, []store.Notice)
	log     *slog.Logger
	queue   *Batcher[*call]
	merged  atomic.Int64 // statements sent for several transitions at once
}

// New returns a Committer of transactions on pool's connections. Their
// type maps should have the package's arrays (RegisterArrays), unless
// o.Plain.
func New(pool *pgxpool.Pool, o Options) *Committer {
	c := &Committer{pool: pool, plain: o.Plain, publish: o.Publish, log: o.Logger,
		queue: NewBatcher[*call](max(o.Writers, 1), maxGroup)}
	if c.publish == nil {
		c.publish = func(context.Context, []store.Notice) {}
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c
}

// maxGroup bounds a group, so that the first transition in it does not
// wait for too many others.
const maxGroup = 128

// lockTimeout bounds a shared transaction's waits for a row lock. Two
// groups each hold the locks of all their transitions, taken in no
// particular order, so two groups (of two writers, or two processes) can
// deadlock where their transitions alone would not; the server would
// notice only after deadlock_timeout (1 s by default). A group that waits
// this long instead gives up, and its transitions run again alone.
const lockTimeout = "200ms"

// groupTimeout bounds a group's transaction, which runs without its
// callers' contexts.
const groupTimeout = time.Minute

// A call is one transition waiting for its group.
type call struct {
	ctx context.Context //nolint:containedctx // the caller's, carried to the leader that runs its group
	fn  func(*Tx) error
	err error // its result, once its group has run

	// owns says that fn records every run it locks with Tx.Own, and
	// first are its first reads, in order, to send ahead (none: not
	// known). See ahead.go.
	owns  bool
	first []*Read
}

// Run runs fn as one transition, in a transaction shared with the
// transitions that arrive together with it, and returns fn's error once
// that transaction has committed; then fn's notices are published. If ctx
// ends while the transition waits for its group, Run returns the context's
// error and fn never runs. fn may run more than once (see Committer), so
// it must set its results afresh each time.
func (c *Committer) Run(ctx context.Context, fn func(*Tx) error) error {
	return c.run(&call{ctx: ctx, fn: fn})
}

// RunOwning is Run for a transition that records every run it locks with
// Tx.Own, and whose first reads, if any, are first: its group may then
// send those reads ahead (see ahead.go), and fn must return ErrStale from
// Tx.Own, and when a read that Tx.Ahead says was read ahead found none of
// the rows it locks.
func (c *Committer) RunOwning(ctx context.Context, first []*Read, fn func(*Tx) error) error {
	return c.run(&call{ctx: ctx, fn: fn, owns: true, first: first})
}

// Alone runs fn in a transaction of its own and, when fn returns nil,
// sends its writes and commits; then it publishes fn's notices. On an
// error the transaction is rolled back and nothing is published.
//
// When the connection breaks before COMMIT is sent (a server restart, a
// pooled connection that died while idle), or the server rolls the
// transaction back to break a deadlock, nothing was committed, so Alone
// runs fn again, up to three times in all. A break after COMMIT was sent
// is returned as it is: the transition may or may not have committed,
// which the caller learns from the run's state.
func (c *Committer) Alone(ctx context.Context, fn func(*Tx) error) error {
	for try := 1; ; try++ {
		retry, err := c.try(ctx, fn)
		if !retry || try == 3 || ctx.Err() != nil {
			return err
		}
		c.log.Debug("postgres transaction not committed; trying it again", "err", err)
	}
}

// Once is Alone without the tries again, for a caller that decides
// itself what to try again (RolledBack).
func (c *Committer) Once(ctx context.Context, fn func(*Tx) error) error {
	_, err := c.try(ctx, fn)
	return err
}

// Merged returns how many statements the committer sent for several
// transitions at once (merge.go, ahead.go).
func (c *Committer) Merged() int64 { return c.merged.Load() }

// Queued returns how many transitions wait for a group.
func (c *Committer) Queued() int { return c.queue.Len() }

// try is one try of Alone. retry reports that nothing was committed and
// fn may run again.
func (c *Committer) try(ctx context.Context, fn func(*Tx) error) (retry bool, err error) {
	if c.plain {
		return c.tryPlain(ctx, fn)
	}
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	// A connection left inside a transaction is closed, not reused.
	defer conn.Release()
	t := &Tx{c: &conversation{ctx: ctx, conn: conn, queued: []*pgx.QueuedQuery{{SQL: "BEGIN"}}}}
	if err = fn(t); err != nil {
		return conn.Conn().IsClosed() || RolledBack(err), abort(ctx, conn, err)
	}
	t.c.queue(&t.writes)
	if err = t.c.commit(); err != nil {
		return pgconn.SafeToRetry(err) || RolledBack(err), abort(ctx, conn, err)
	}
	c.publish(ctx, t.out)
	return false, nil
}

// run queues cl for its group, and returns its result.
func (c *Committer) run(cl *call) error {
	if c.plain {
		return c.Alone(cl.ctx, cl.fn)
	}
	if err := c.queue.Do(cl.ctx, cl, c.runGroup); err != nil {
		return err
	}
	return cl.err
}

// runGroup runs the calls of a group and sets their results.
func (c *Committer) runGroup(group []*call) {
	results := c.results(group)
	for i, cl := range group {
		cl.err = results[i]
	}
}

// results runs the calls of a group and returns their results.
func (c *Committer) results(group []*call) []error {
	results := make([]error, len(group))
	// A transition alone that declares its first reads runs as a group of
	// one, so that they go with BEGIN: two round trips in all, where
	// alone it takes one more for each read.
	if len(group) == 1 && len(group[0].first) == 0 {
		results[0] = c.Alone(group[0].ctx, group[0].fn)
		return results
	}
	err := c.shared(group, results)
	if errors.Is(err, errNotCommitted) {
		c.log.Debug("postgres group of transitions not committed; running them alone", "transitions", len(group), "err", err)
		for i, cl := range group {
			if cl.ctx.Err() != nil {
				results[i] = context.Cause(cl.ctx)
				continue
			}
			results[i] = c.Alone(cl.ctx, cl.fn)
		}
		return results
	}
	for i := range results {
		if results[i] == nil {
			results[i] = err
		}
	}
	return results
}

// errNotCommitted reports that a group ended before its COMMIT was sent, or
// the server refused the COMMIT: none of it is in the database.
var errNotCommitted = errors.New("group not committed")

// shared runs the calls of a group in one transaction. A call whose
// context has ended is skipped, with its context's error. It fills in the
// result of each call that returned a sentinel, and publishes the notices
// of the others once they are committed. Its error wraps errNotCommitted
// when nothing was committed; any other error came after COMMIT was sent.
func (c *Committer) shared(group []*call, results []error) error {
	// No caller's context may cancel the group: that would cost the
	// others their work. A server that stops answering still ends it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(group[0].ctx), groupTimeout)
	defer cancel()
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", errNotCommitted, err)
	}
	defer conn.Release()
	cv := &conversation{ctx: ctx, conn: conn, owners: map[string]*Tx{}, merged: &c.merged, queued: []*pgx.QueuedQuery{
		{SQL: "BEGIN"},
		{SQL: "SELECT set_config('lock_timeout', $1, true)", Arguments: []any{lockTimeout}},
	}}
	ahead, err := cv.readAhead(group)
	if err != nil {
		return fmt.Errorf("%w: %w", errNotCommitted, abort(ctx, conn, err))
	}
	var out []store.Notice
	blind := false // a transition that records no runs has run
	// A transition whose reads ahead wrote (RunCreate's insert) must be
	// recorded as they wrote, or the group must not commit: its
	// transitions then run alone.
	notRecorded := func(err error) error {
		return fmt.Errorf("%w: %w", errNotCommitted, abort(ctx, conn, fmt.Errorf("a transition that wrote ahead was not recorded: %w", err)))
	}
	for i, cl := range group {
		wrote := ahead != nil && writesAhead(cl.first)
		if cl.ctx.Err() != nil {
			if wrote {
				return notRecorded(context.Cause(cl.ctx))
			}
			results[i] = context.Cause(cl.ctx)
			continue
		}
		t := &Tx{c: cv}
		// After a blind transition, reads ahead may predate its writes,
		// but not writes ahead: none of those transitions creates runs.
		if ahead != nil && (!blind || wrote) {
			t.first = ahead[i]
		}
		err := cl.fn(t)
		if errors.Is(err, ErrStale) {
			if wrote {
				return notRecorded(err)
			}
			t = &Tx{c: cv}
			err = cl.fn(t)
		}
		blind = blind || !cl.owns
		switch {
		case err == nil:
			cv.queue(&t.writes)
			out = append(out, t.out...)
		case sentinel(err) && !wrote:
			results[i] = err
		case sentinel(err):
			return notRecorded(err)
		default:
			return fmt.Errorf("%w: %w", errNotCommitted, abort(ctx, conn, err))
		}
	}
	if err := cv.commit(); err != nil {
		var pgErr *pgconn.PgError
		if pgconn.SafeToRetry(err) || errors.As(err, &pgErr) {
			err = fmt.Errorf("%w: %w", errNotCommitted, err)
		}
		return abort(ctx, conn, err)
	}
	c.publish(ctx, out)
	return nil
}

// sentinel reports whether err is one that a transition returns only
// having changed nothing.
func sentinel(err error) bool {
	return errors.Is(err, store.ErrNotFound) ||
		errors.Is(err, store.ErrLeaseLost) ||
		errors.Is(err, store.ErrRunFinished) ||
		errors.Is(err, store.ErrNotRedrivable)
}

// RolledBack reports whether err is the server aborting the transaction
// to break a deadlock (or a serialization failure): nothing was committed,
// and running it again will likely succeed. A deadlock can form between a
// transaction that locks a parent run and then its children (ending a run)
// and RunRenew or RunRelease, which lock an owner's runs in id order.
func RolledBack(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001")
}

// abort rolls back the transaction conn is in, if it is in one, and
// returns err.
func abort(ctx context.Context, conn *pgxpool.Conn, err error) error {
	if !conn.Conn().IsClosed() && conn.Conn().PgConn().TxStatus() != 'I' {
		rbCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, _ = conn.Exec(rbCtx, "ROLLBACK")
		cancel()
	}
	return err
}
