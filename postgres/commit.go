package postgres

import (
	"context"
	"errors"
	"fmt"
	"reprise/store"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A committer runs the store's transitions in shared transactions: group
// commit. A transition alone is a transaction of its own, with a BEGIN, a
// COMMIT and a WAL flush, two round trips and a connection for the whole
// time; most of what the server spends on a small transition is that. The
// transitions that arrive together instead run one after the other in one
// transaction on one connection, each one's writes sent with the next one's
// read, and share one COMMIT: n transitions cost n+1 round trips and one
// flush.
//
// There is no committer goroutine (see leadQueue). A caller that finds
// fewer than Options.Writers groups running leads one: it takes every
// queued transition (up to maxGroup), runs them, commits, hands each caller
// its result, and passes the lead to the oldest transition queued
// meanwhile. The others wait in the queue.
//
// A transition that returns a sentinel error (reprise.ErrNotFound,
// ErrLeaseLost, ErrRunFinished, ErrNotRedrivable) has changed nothing, by
// the Store contract: it may have locked rows, which the group then holds
// until its commit, and its group carries on. Any other error, or a
// connection that breaks before COMMIT is sent, means nothing of the group
// was committed: each of its transitions then runs again alone (Store.alone,
// which also tries again after a deadlock), so that one bad transition never
// costs the others their work. A break after COMMIT was sent is every
// transition's error, as it is for a transition alone.
type committer = leadQueue[*call]

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
	ctx context.Context
	fn  func(*txn) error
	err error // its result, once its group has run

	// owns says that fn records every run it locks with txn.own, and
	// first are its first reads, in order, to send ahead (none: not
	// known). See ahead.go.
	owns  bool
	first []*aheadRead
}

// tx runs fn as one transition, in a transaction shared with the
// transitions that arrive together with it, and returns fn's error once
// that transaction has committed; then fn's notices are published. If ctx
// ends while the transition waits for its group, tx returns the context's
// error and fn never runs. fn may run more than once (see committer), so
// it must set its results afresh each time.
func (s *Store) tx(ctx context.Context, fn func(*txn) error) error {
	return s.run(&call{ctx: ctx, fn: fn})
}

// txOwning is tx for a transition that records every run it locks with
// txn.own, and whose first reads, if any, are first: its group may then
// send those reads ahead (see ahead.go).
func (s *Store) txOwning(ctx context.Context, first []*aheadRead, fn func(*txn) error) error {
	return s.run(&call{ctx: ctx, fn: fn, owns: true, first: first})
}

// run queues cl for its group, and returns its result.
func (s *Store) run(cl *call) error {
	if err := s.committer.do(cl.ctx, cl, s.runGroup); err != nil {
		return err
	}
	return cl.err
}

// runGroup runs the calls of a group and sets their results.
func (s *Store) runGroup(group []*call) {
	results := s.results(group)
	for i, cl := range group {
		cl.err = results[i]
	}
}

// results runs the calls of a group and returns their results.
func (s *Store) results(group []*call) []error {
	results := make([]error, len(group))
	// A transition alone that declares its first reads runs as a group of
	// one, so that they go with BEGIN: two round trips in all, where
	// alone it takes one more for each read.
	if len(group) == 1 && len(group[0].first) == 0 {
		results[0] = s.alone(group[0].ctx, group[0].fn)
		return results
	}
	err := s.shared(group, results)
	if errors.Is(err, errNotCommitted) {
		s.log.Debug("postgres group of transitions not committed; running them alone", "transitions", len(group), "err", err)
		for i, cl := range group {
			if cl.ctx.Err() != nil {
				results[i] = context.Cause(cl.ctx)
				continue
			}
			results[i] = s.alone(cl.ctx, cl.fn)
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
func (s *Store) shared(group []*call, results []error) error {
	// No caller's context may cancel the group: that would cost the
	// others their work. A server that stops answering still ends it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(group[0].ctx), groupTimeout)
	defer cancel()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", errNotCommitted, err)
	}
	defer conn.Release()
	c := &conversation{ctx: ctx, conn: conn, owners: map[string]*txn{}, merged: &s.merged, queued: []*pgx.QueuedQuery{
		{SQL: "BEGIN"},
		{SQL: "SELECT set_config('lock_timeout', $1, true)", Arguments: []any{lockTimeout}},
	}}
	ahead, err := c.readAhead(group)
	if err != nil {
		return fmt.Errorf("%w: %w", errNotCommitted, s.abort(ctx, conn, err))
	}
	var out outbox
	blind := false // a transition that records no runs has run
	// A transition whose reads ahead wrote (RunCreate's insert) must be
	// recorded as they wrote, or the group must not commit: its
	// transitions then run alone.
	notRecorded := func(err error) error {
		return fmt.Errorf("%w: %w", errNotCommitted, s.abort(ctx, conn, fmt.Errorf("a transition that wrote ahead was not recorded: %w", err)))
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
		t := &txn{c: c}
		// After a blind transition, reads ahead may predate its writes,
		// but not writes ahead: none of those transitions creates runs.
		if ahead != nil && (!blind || wrote) {
			t.first = ahead[i]
		}
		err := cl.fn(t)
		if errors.Is(err, errStale) {
			if wrote {
				return notRecorded(err)
			}
			t = &txn{c: c}
			err = cl.fn(t)
		}
		blind = blind || !cl.owns
		switch {
		case err == nil:
			c.queue(&t.writes)
			out = append(out, t.out...)
		case sentinel(err) && !wrote:
			results[i] = err
		case sentinel(err):
			return notRecorded(err)
		default:
			return fmt.Errorf("%w: %w", errNotCommitted, s.abort(ctx, conn, err))
		}
	}
	if err := c.commit(); err != nil {
		var pgErr *pgconn.PgError
		if pgconn.SafeToRetry(err) || errors.As(err, &pgErr) {
			err = fmt.Errorf("%w: %w", errNotCommitted, err)
		}
		return s.abort(ctx, conn, err)
	}
	s.publish(out)
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
