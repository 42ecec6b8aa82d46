package pgtx

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The plain path (Options.Plain): every transition is a pgx.Tx of its own,
// and every statement a round trip of its own, in the order the transition
// made them: BEGIN; each read, after the writes queued before it, one at a
// time; the writes left; COMMIT. Nothing is shared, read ahead, merged or
// pipelined, and arguments go to pgx's codecs as the transition gave them.
// It is the grouped path's reference: both run the same transitions, and
// storetest runs on both.

// A plainTx is the transaction of a transition on the plain path.
type plainTx struct {
	ctx context.Context //nolint:containedctx // the caller's, for the statements of a transition that takes none
	tx  pgx.Tx
	t   *Tx
}

// tryPlain is one try of Alone on the plain path.
func (c *Committer) tryPlain(ctx context.Context, fn func(*Tx) error) (retry bool, err error) {
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return pgconn.SafeToRetry(err), err
	}
	t := &Tx{}
	t.p = &plainTx{ctx: ctx, tx: tx, t: t}
	if err := fn(t); err != nil {
		return tx.Conn().IsClosed() || RolledBack(err), t.p.rollback(err)
	}
	if err := t.p.send(); err != nil {
		return tx.Conn().IsClosed() || RolledBack(err), t.p.rollback(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return pgconn.SafeToRetry(err) || RolledBack(err), err
	}
	c.publish(ctx, t.out)
	return false, nil
}

// query sends the writes queued so far, each alone, and then the read.
func (p *plainTx) query(sql string, args ...any) (pgx.Rows, error) {
	if err := p.send(); err != nil {
		return nil, err
	}
	return p.tx.Query(p.ctx, sql, args...)
}

// send sends the transition's queued writes, one statement at a time, and
// empties its queue. A write's function, if it has one, reads its result.
func (p *plainTx) send() error {
	qs := p.t.writes.QueuedQueries
	p.t.writes.QueuedQueries = nil
	for _, qq := range qs {
		if err := p.tx.SendBatch(p.ctx, &pgx.Batch{QueuedQueries: []*pgx.QueuedQuery{qq}}).Close(); err != nil {
			return err
		}
	}
	return nil
}

// rollback rolls the transaction back and returns err.
func (p *plainTx) rollback(err error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), 5*time.Second)
	defer cancel()
	_ = p.tx.Rollback(ctx)
	return err
}
