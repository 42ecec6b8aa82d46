package reprise

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"reprise/store"
)

// claimRuns takes runs no live engine holds (after a restart, or started
// by another process), and renews the leases of the runs this engine holds.
func (e *Engine) claimRuns(ctx context.Context) {
	renewEvery := e.cfg.RunLeaseTTL / 3
	lastRenew := e.clock.Now()
	var lastLook time.Time // for gone engines
	t := e.clock.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-e.claimc:
		}
		e.act.add(1)
		if now := e.clock.Now(); now.Sub(lastRenew) >= renewEvery {
			if err := e.store.RunRenew(ctx, &store.RunRenewParams{Owner: e.id, LeaseTTL: e.cfg.RunLeaseTTL}); err != nil && ctx.Err() == nil {
				e.log.Warn("renew run leases", "err", err)
			}
			lastRenew = now
		}
		if now := e.clock.Now(); now.Sub(lastLook) >= e.cfg.PollInterval {
			e.takeOver(ctx)
			lastLook = now
		}
		e.claimRunsOnce(ctx)
		if _, ok := e.store.(store.Notifier); ok {
			e.pollReplayers(ctx, e.clock.Now())
		}
		e.act.add(-1)
		if !t.Stop() {
			select {
			case <-t.C():
			default:
			}
		}
		t.Reset(min(e.cfg.PollInterval, renewEvery))
	}
}

// claimRunsOnce claims runs while this engine has room for the attempts
// they will start (see runRoomLocked), so that a backlog is shared
// by the engines on a store rather than resident in the first to claim,
// and a claimed run's first step is leased as it is scheduled instead of
// queued and claimed again.
func (e *Engine) claimRunsOnce(ctx context.Context) {
	e.mu.Lock()
	names := make([]string, 0, len(e.workflows))
	for name := range e.workflows {
		names = append(names, name)
	}
	e.mu.Unlock()
	if len(names) == 0 {
		return
	}
	for {
		e.mu.Lock()
		limit := min(100, e.runRoomLocked())
		if limit <= 0 {
			e.moreRuns = true
		}
		e.mu.Unlock()
		if limit <= 0 {
			return
		}
		leases, err := e.store.RunClaim(ctx, &store.RunClaimParams{
			Owner: e.id, Workflows: names, Limit: limit, LeaseTTL: e.cfg.RunLeaseTTL,
		})
		if err != nil {
			if ctx.Err() == nil {
				e.log.Warn("claim runs", "err", err)
			}
			return
		}
		for _, l := range leases {
			e.startReplayer(l, l.LastSeq == 1, true) // RunStarted alone: nothing to read
		}
		e.mu.Lock()
		e.moreRuns = len(leases) == limit
		e.mu.Unlock()
		if len(leases) < limit {
			return
		}
	}
}

// claimSoon wakes the loop that claims runs.
func (e *Engine) claimSoon() {
	select {
	case e.claimc <- struct{}{}:
	default:
	}
}

// pollReplayers makes resident runs read their histories now and then:
// with a Notifier store, outcomes recorded by other processes arrive as
// notices, and a process that dies between its commit and its notice loses
// it. A run polls a third of RunLeaseTTL after its last news (as often as
// this engine renews its leases), then ever less often, up to every
// RunLeaseTTL, so waiting and parked runs cost little. A run with an
// attempt in this engine waits for that attempt's outcome, which comes
// here: it polls after, if still waiting.
func (e *Engine) pollReplayers(ctx context.Context, now time.Time) {
	e.mu.Lock()
	local := make(map[string]bool, len(e.attempts))
	for _, a := range e.attempts {
		local[a.task.RunID] = true
	}
	replayers := make([]*replayer, 0, len(e.replayers))
	for id, r := range e.replayers {
		if !local[id] {
			replayers = append(replayers, r)
		}
	}
	e.mu.Unlock()
	first := max(e.cfg.RunLeaseTTL/3, e.cfg.PollInterval)
	for _, r := range replayers {
		if r.pollDue(now, first, max(e.cfg.RunLeaseTTL, first)) {
			r.resync()
		}
	}
	e.pollParked(ctx, now, first, max(e.cfg.RunLeaseTTL, first))
}

// startReplayer starts executing a run this engine has leased; fresh says
// that its history is RunStarted alone (it was just created, or claimed
// so), so there is none to load; claimed, that claimRunsOnce claimed it.
func (e *Engine) startReplayer(lease store.RunLease, fresh, claimed bool) {
	e.mu.Lock()
	wf := e.workflows[lease.Run.Workflow]
	if p, ok := e.parked[lease.Run.ID]; ok {
		// Parked, and claimed back after its lease lapsed: the newer token.
		delete(e.parked, lease.Run.ID)
		lease.Token = max(lease.Token, p.token)
	}
	if r := e.replayers[lease.Run.ID]; r != nil {
		// This engine's own lease lapsed and it claimed the run back. Tokens
		// only grow: an older lease (a replay planned before the claim)
		// must not replace the newer one.
		for old := r.token.Load(); lease.Token > old && !r.token.CompareAndSwap(old, lease.Token); old = r.token.Load() {
		}
		e.mu.Unlock()
		return
	}
	if wf == nil || !e.running {
		e.mu.Unlock()
		return
	}
	r := newReplayer(e, lease, wf)
	e.replayers[r.id] = r
	if claimed {
		r.claimed.Store(true)
		e.claiming++
	}
	e.replayersWG.Add(1) // under e.mu, which Run's shutdown takes before it waits
	e.residentAddedLocked()
	e.mu.Unlock()
	e.launch(r, fresh)
}

// launch starts a replayer's goroutine, counted in e.replayersWG already.
func (e *Engine) launch(r *replayer, fresh bool) {
	e.act.add(1) // run takes it back
	e.goroutines.Go(func() { r.run(fresh) })
}

// replayerDone forgets a replayer whose goroutine ends.
func (e *Engine) replayerDone(r *replayer, finished bool) {
	e.releaseClaim(r)
	e.mu.Lock()
	if e.replayers[r.id] == r {
		delete(e.replayers, r.id)
	}
	e.startedLocked(r.id)
	e.mu.Unlock()
	r.cancel(nil)
	// Waiters skip reading a resident run and count on this: with the end
	// state, or with nil to read the run, which may have ended otherwise
	// (cancelled, say) or moved to another engine.
	if finished {
		e.wakeWaiters(r.id, r.final)
	} else {
		e.wakeWaiters(r.id, nil)
	}
	e.replayersWG.Done()
}

// replayerFailed handles a replayer that could not go on for a reason
// that may pass (a store error): the run is replayed from history a little
// later.
func (e *Engine) replayerFailed(r *replayer, err error) {
	e.log.Warn("run interrupted; replaying it later", "run_id", r.id, "err", err)
	lease := store.RunLease{Run: r.known(), Token: r.token.Load()}
	e.replayerDone(r, false)
	e.replayLater(lease)
}

// replayerLeaseLost ends a replayer whose write with token was refused. If
// this engine claimed the run again meanwhile (its lease had lapsed under
// load, and the claim stored a newer token in the replayer after the write
// was sent), the run is still this engine's, renewed with its other runs:
// replay it at once under the newer token, or no engine ever would.
func (e *Engine) replayerLeaseLost(r *replayer, token int64) {
	e.replayerDone(r, false)
	// Once r is out of e.replayers no claim can store a token in it.
	if newer := r.token.Load(); newer != token {
		e.startReplayer(store.RunLease{Token: newer, Run: r.known()}, false, false)
	}
}

// replayAgain ends a replayer whose workflow saw a result the store then
// refused (its lease had lapsed), and replays the run from its history
// under the same lease.
func (e *Engine) replayAgain(r *replayer) {
	e.replayerDone(r, false)
	e.startReplayer(store.RunLease{Token: r.token.Load(), Run: r.known()}, false, false)
}

// replayLater starts a replayer for a run this engine holds after
// PollInterval, and tries again while the store fails: this engine renews
// the run's lease all along, so no other engine would take the run over.
func (e *Engine) replayLater(lease store.RunLease) {
	e.clock.AfterFunc(e.cfg.PollInterval, func() {
		run, err := e.store.RunGet(e.storeCtx, lease.Run.ID)
		switch {
		case err == nil && !run.Status.Final():
			lease.Run = run
			e.startReplayer(lease, false, false)
		case err != nil && !errors.Is(err, ErrNotFound) && e.isRunning():
			e.replayLater(lease)
		}
	})
}

func (e *Engine) isRunning() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.running
}

// handOffMargin is how long an attempt's lease must still hold for its
// result to be handed over rather than recorded at once: the workflow's
// next advance, which records it, must come before the lease lapses, or
// the result is refused and the step runs again.
const handOffMargin = 2 * time.Second

// handOff gives a successful attempt's result to its run's replayer, if
// the run's workflow waits for exactly that step here (see
// replayer.handOff) and the attempt's lease leaves time to record it.
func (e *Engine) handOff(t *store.Task, out json.RawMessage) bool {
	if e.clock.Now().Add(handOffMargin).After(t.LeaseUntil) {
		return false
	}
	r := e.replayerFor(t.RunID)
	return r != nil && r.handOff(t, out)
}

// deliver hands what a store call appended to the replayer that waits for
// it: this engine's, or a peer's.
func (e *Engine) deliver(o *store.Outcome) {
	if o == nil || o.Owner == "" {
		return
	}
	if o.Owner == e.id {
		e.wakeRun(o.RunID, o.Events)
		return
	}
	for _, p := range e.peers() {
		if p.id == o.Owner {
			p.wakeRun(o.RunID, o.Events)
		}
	}
}

// replayerFor returns the replayer of run id, if this engine executes it.
func (e *Engine) replayerFor(id string) *replayer {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.replayers[id]
}
