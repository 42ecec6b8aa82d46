package postgres

import (
	"context"
	"fmt"

	"reprise/postgres/internal/pgtx"
	"reprise/store"
)

// SignalSend appends SignalReceived{Signal: Name, Input: Payload} to an
// active run's current execution and tells the run's owner.
func (s *Store) SignalSend(ctx context.Context, p *store.SignalSendParams) (*store.Outcome, error) {
	var o *store.Outcome
	err := s.committer.Run(ctx, func(tx *pgtx.Tx) error {
		r, _, now, err := lockRun(ctx, tx, s.clock(), p.RunID, false)
		if err != nil {
			return err
		}
		if r.status.Final() {
			return store.ErrRunFinished
		}
		a := newAppender(now)
		if err := a.add(r.runHead, p.Received()); err != nil {
			return err
		}
		a.queue(tx)
		tx.Notify(Notice{Kind: NoticeOutcome, RunID: r.id, Owner: r.owner, Seq: r.lastSeq})
		o = &store.Outcome{RunID: r.id, Owner: r.owner, Events: a.events}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("send signal %q to run %q: %w", p.Name, p.RunID, err)
	}
	return o, nil
}
