package reprise

import (
	"context"
	"errors"
	"fmt"

	"reprise/store"
)

// Engines and their leases. An engine records its worker id in the store
// as it starts (Store.EngineStart) and the store can tell, from then on,
// whether it is live. An engine that dies without stopping leaves run and
// task leases behind; rather than wait for them to lapse, the engines on
// the store look for gone engines every PollInterval and release what they
// held: their runs are claimed again at once, and their attempts fail as
// WorkerLost and are retried by their policies. An engine restarted under
// the id of its dead incarnation does the same for that incarnation
// before it claims anything.

// identify records this engine as live and releases what an earlier,
// dead engine under the same id held.
func (e *Engine) identify(ctx context.Context) error {
	err := e.store.EngineStart(ctx, &store.EngineStartParams{ID: e.id})
	if errors.Is(err, ErrEngineLive) {
		return fmt.Errorf("engine %s: another live engine runs under this WorkerID; give each engine process its own: %w", e.id, err)
	}
	if err != nil {
		return fmt.Errorf("engine %s: %w", e.id, err)
	}
	e.startedAt = e.clock.Now()
	if err := e.release(ctx, e.id); err != nil {
		e.log.Warn("release the leases of this engine's last run", "worker_id", e.id, "err", err)
	}
	return nil
}

// release frees the run and task leases an engine that is gone held.
func (e *Engine) release(ctx context.Context, id string) error {
	if err := e.store.RunRelease(ctx, &store.RunReleaseParams{Owner: id}); err != nil {
		return err
	}
	n, err := e.store.TaskRelease(ctx, &store.TaskReleaseParams{Owner: id})
	if err != nil {
		return err
	}
	if n > 0 {
		e.log.Info("released the attempts of a gone engine", "worker_id", id, "attempts", n)
	}
	e.claimSoon()
	e.kick()
	return nil
}

// takeOver releases what the engines that died without stopping held,
// and forgets them. An engine counts as gone when two looks in a row, a
// PollInterval apart, find it so: a live engine whose liveness lapsed for
// a moment (PostgreSQL restarted under it, say) has one PollInterval to
// take it back (the PostgreSQL store does so as it looks for gone
// engines) before its work is taken over.
func (e *Engine) takeOver(ctx context.Context) {
	ids, err := e.store.EngineGone(ctx)
	if err != nil {
		if ctx.Err() == nil {
			e.log.Warn("look for gone engines", "err", err)
		}
		return
	}
	suspects := make(map[string]bool, len(ids))
	for _, id := range ids {
		if id == e.id {
			continue // this engine is live, whatever the store says
		}
		suspects[id] = true
		if !e.suspects[id] {
			continue
		}
		e.mu.Lock()
		e.gone[id] = true
		e.mu.Unlock()
		if err := e.release(ctx, id); err != nil {
			if ctx.Err() == nil {
				e.log.Warn("release a gone engine's leases", "worker_id", id, "err", err)
			}
			continue
		}
		e.log.Info("took over from a gone engine", "worker_id", id)
		if err := e.store.EngineStop(ctx, id); err != nil && ctx.Err() == nil {
			e.log.Warn("forget a gone engine", "worker_id", id, "err", err)
		}
		delete(suspects, id)
	}
	e.suspects = suspects
}

// lostWorker says whether the lapsed lease of t was held by an engine
// known to be gone: this engine's dead incarnation, or one takeOver found.
func (e *Engine) lostWorker(t *store.Task) bool {
	if t.Owner == e.id {
		return t.StartedAt.Before(e.startedAt)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.gone[t.Owner]
}
