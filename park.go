package reprise

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"reprise/store"
)

// Resident runs are a cache. A replayer whose workflow waits for something
// that is not an attempt of this engine (a backoff, a timer, a signal, a
// child run, a step in another process's or a pull worker's hands) may be
// evicted while more than Config.MaxResidentRuns are resident: its
// goroutine and replay state are dropped, and the run is parked. The engine
// keeps the run's lease, renewed with its other runs' in one write, so no
// other engine claims it and every outcome recorded for it still names this
// engine; the next one that would wake it revives it, and the new replayer
// replays the run from its history, as after a crash. Keeping the lease
// also keeps its fencing token: the revived replayer writes with it, and
// if the lease was lost meanwhile (this engine paused past RunLeaseTTL and
// another claimed the run) its first write is refused and it steps aside.

// errEvicted is the cause a replayer's context ends with when it is evicted.
var errEvicted = errors.New("run evicted from memory")

// A parkedRun is what the engine keeps of a run it evicted: small, as
// there may be millions.
type parkedRun struct {
	workflow string
	token    int64
	// seen is the seq up to which the evicted replayer had every event: a
	// notice of an outcome up to it is old news.
	seen int64
	// pollAt (Unix nanoseconds; 0 for not yet planned) and pollEvery pace
	// the reads for outcomes whose notices were lost (see pollParked).
	pollAt    int64
	pollEvery time.Duration
}

// evictLowWater is the share of MaxResidentRuns an eviction brings the
// resident runs down to, so that evictions come in batches, not one per
// run that blocks.
const evictLowWater = 0.9

// evictPause is the least time between two passes of evictRuns.
const evictPause = 20 * time.Millisecond

// evictMinWait is how far off a run's retry must be for the run to be
// evicted: one that hears of its step sooner would be replayed at once,
// a replay spent to save its memory for a moment.
const evictMinWait = 2 * time.Second

// parkedPollBatch caps the parked runs whose histories one pass of
// pollParked reads, so that many parked runs do not hold up claims.
const parkedPollBatch = 200

// evictRuns evicts resident runs while more than MaxResidentRuns are
// resident, each time it is poked (see evictSoon), at most once every
// evictPause: a pass looks at every resident run, and while it cannot
// evict enough, every run that blocks pokes it again.
func (e *Engine) evictRuns(ctx context.Context) {
	// The pause paces the work, on the machine's time: it is no part of
	// what the engine does when, and a pass poked meanwhile keeps the
	// engine busy until it is done, so a fake clock waits for it.
	pause := time.NewTimer(0)
	defer pause.Stop()
	for {
		select {
		case <-ctx.Done():
			select {
			case <-e.evictc:
				e.act.add(-1)
			default:
			}
			return
		case <-e.evictc:
		}
		e.evictOnce()
		e.act.add(-1) // added by evictSoon
		pause.Reset(evictPause)
		select {
		case <-ctx.Done():
		case <-pause.C:
		}
	}
}

// evictSoon pokes evictRuns if the resident runs may be over the limit.
// The engine is busy until evictRuns has taken the poke.
func (e *Engine) evictSoon() {
	e.act.add(1)
	select {
	case e.evictc <- struct{}{}:
	default:
		e.act.add(-1)
	}
}

// residentAddedLocked pokes evictRuns when a run became resident past
// the limit. e.mu must be held.
func (e *Engine) residentAddedLocked() {
	if limit := e.cfg.MaxResidentRuns; limit > 0 && len(e.replayers) > limit {
		e.evictSoon()
	}
}

// evictOnce evicts the least recently active of the runs that can be
// evicted. Once more than MaxResidentRuns are resident, it evicts down to
// evictLowWater of the limit, at this pass or, for the runs busy now, at
// those their blocks bring. A run can be evicted while its workflow waits
// for something other than an attempt of this engine, with nothing handed
// or pushed to it that it has not taken.
func (e *Engine) evictOnce() {
	limit := e.cfg.MaxResidentRuns
	if limit <= 0 {
		return
	}
	type candidate struct {
		r     *replayer
		since uint64
	}
	e.mu.Lock()
	if len(e.replayers) > limit {
		e.draining = true
	}
	over := len(e.replayers) - int(float64(limit)*evictLowWater)
	if !e.draining || over <= 0 {
		e.draining = false
		e.evictShort.Store(false)
		e.mu.Unlock()
		return
	}
	// A run that blocks from here on pokes again, if this pass is short.
	e.evictShort.Store(true)
	local := make(map[string]bool, len(e.attempts))
	for _, a := range e.attempts {
		local[a.task.RunID] = true
	}
	var cands []candidate
	soon := e.clock.Now().Add(evictMinWait)
	for id, r := range e.replayers {
		if local[id] {
			continue
		}
		if since, ok := r.idleSince(soon); ok {
			cands = append(cands, candidate{r, since})
		}
	}
	e.mu.Unlock()
	slices.SortFunc(cands, func(a, b candidate) int { return cmp.Compare(a.since, b.since) })
	evicted := 0
	for _, c := range cands {
		if evicted == over {
			break
		}
		if c.r.evict() {
			evicted++
		}
	}
	if evicted == over {
		e.mu.Lock()
		e.draining = false
		e.mu.Unlock()
		e.evictShort.Store(false)
	}
}

// idleSince reports whether the replayer's workflow is blocked with
// nothing to take and no retry due before soon, and since when (an
// order, not a time).
func (r *replayer) idleSince(soon time.Time) (uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok := r.blocked && !r.evicting && r.handed == nil && !r.stale && len(r.wake) == 0 && !r.exited
	return r.blockedAt, ok && !retrySoon(r.inbox, soon)
}

// retrySoon reports whether the last of events that plans a retry plans
// it before soon: the run is about to hear of its step again.
func retrySoon(events []Event, soon time.Time) bool {
	for i := len(events) - 1; i >= 0; i-- {
		if ev := &events[i]; ev.Type == store.EventAttemptFailed && !ev.RetryAt.IsZero() {
			return ev.RetryAt.Before(soon)
		}
	}
	return false
}

// evict ends the replayer's goroutine at its wait, unless something came
// for it meanwhile; handOff refuses from then on, and what push brings
// before the goroutine ends revives the run at once (see parkReplayer).
func (r *replayer) evict() bool {
	r.mu.Lock()
	ok := r.blocked && !r.evicting && r.handed == nil && !r.stale && len(r.wake) == 0 && !r.exited
	if ok {
		r.evicting = true
		r.e.act.add(1) // until the goroutine has ended: see exit
	}
	r.mu.Unlock()
	if ok {
		r.cancel(errEvicted)
	}
	return ok
}

// parkReplayer forgets an evicted replayer's goroutine and keeps its run
// parked, or replays the run at once if something came for it while it
// was leaving.
func (e *Engine) parkReplayer(r *replayer) {
	e.mu.Lock()
	r.mu.Lock()
	r.exited, r.parked = true, true
	r.dropWake()
	wake := r.stale || r.handed != nil || wakes(r.inbox)
	p := parkedRun{workflow: r.workflow.name, token: r.token.Load(), seen: r.seen}
	r.mu.Unlock()
	if e.replayers[r.id] == r {
		delete(e.replayers, r.id)
	}
	if e.running {
		e.parked[r.id] = p
	}
	e.mu.Unlock()
	e.replayersWG.Done()
	if wake {
		e.wakeRun(r.id, nil)
	}
}

// wakeRun pushes events (or, with none, a wake-up to read the history) to
// the replayer of run id, reviving the run first if it is parked and
// events may wake it.
func (e *Engine) wakeRun(id string, events []Event) {
	for {
		e.mu.Lock()
		e.startedLocked(id)
		r := e.replayers[id]
		if r == nil {
			if p, ok := e.parked[id]; ok && (len(events) == 0 || wakes(events)) {
				r = e.reviveLocked(id, p)
			}
		}
		e.mu.Unlock()
		if r == nil || r.push(events) {
			return
		}
		// r was parked after the lookup: look again.
	}
}

// reviveLocked starts a new replayer for a parked run, which reads the run
// and its history before it replays. e.mu must be held.
func (e *Engine) reviveLocked(id string, p parkedRun) *replayer {
	delete(e.parked, id)
	wf := e.workflows[p.workflow]
	if wf == nil || !e.running {
		return nil
	}
	r := newReplayer(e, store.RunLease{Run: &Run{ID: id, Workflow: p.workflow}, Token: p.token}, wf)
	r.revived = true
	e.replayers[id] = r
	e.replayersWG.Add(1)
	e.residentAddedLocked()
	e.launch(r, false)
	return r
}

// reload reads a revived run, which the replayer knew only by its id and
// workflow. It reports false if the run is no longer this engine's to go on
// with: finished meanwhile (cancelled, say), or gone.
func (r *replayer) reload() (bool, error) {
	run, err := r.e.store.RunGet(r.e.storeCtx, r.id)
	switch {
	case errors.Is(err, ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	case run.Status.Final():
		return false, nil
	}
	r.input, r.execution, r.parentID = run.Input, max(run.Execution, 1), run.ParentID
	r.created, r.now = run.CreatedAt, run.CreatedAt
	return true, nil
}

// parkedHeard notes a notice of an outcome up to seq (0: not known) for a
// parked run, and revives it unless it had seen that far. It reports
// whether id is parked.
func (e *Engine) parkedHeard(id string, seq int64) bool {
	e.mu.Lock()
	p, ok := e.parked[id]
	old := ok && seq != 0 && seq <= p.seen
	if old {
		p.pollAt = 0
		e.parked[id] = p
	}
	e.mu.Unlock()
	if ok && !old {
		e.wakeRun(id, nil)
	}
	return ok
}

// pollParked reads, for parked runs whose poll is due, the events after
// those they had seen, and revives those with news, as pollReplayers does
// for resident ones; at most parkedPollBatch a pass.
func (e *Engine) pollParked(ctx context.Context, now time.Time, first, most time.Duration) {
	type due struct {
		id   string
		seen int64
	}
	var dues []due
	at := now.UnixNano()
	e.mu.Lock()
	for id, p := range e.parked {
		switch {
		case p.pollAt == 0:
			p.pollAt, p.pollEvery = now.Add(first).UnixNano(), first
		case at < p.pollAt || len(dues) == parkedPollBatch:
			continue
		default:
			p.pollEvery = min(2*p.pollEvery, most)
			p.pollAt = now.Add(p.pollEvery).UnixNano()
			dues = append(dues, due{id, p.seen})
		}
		e.parked[id] = p
	}
	e.mu.Unlock()
	for _, d := range dues {
		events, err := e.store.HistoryList(ctx, &store.HistoryListParams{RunID: d.id, AfterSeq: d.seen})
		if err != nil {
			if ctx.Err() == nil {
				e.log.Warn("read parked run's history", "run_id", d.id, "err", err)
			}
			return
		}
		if n := len(events); n > 0 && wakes(events) {
			e.wakeRun(d.id, events)
		} else if n > 0 {
			e.mu.Lock()
			if p, ok := e.parked[d.id]; ok {
				p.seen = max(p.seen, events[n-1].Seq)
				e.parked[d.id] = p
			}
			e.mu.Unlock()
		}
	}
}

// resyncParkedLocked makes every parked run poll at the next pass, after notices
// may have been lost; they are not all revived at once.
func (e *Engine) resyncParkedLocked(now time.Time) {
	for id, p := range e.parked {
		p.pollAt, p.pollEvery = now.UnixNano(), max(p.pollEvery, e.cfg.PollInterval)
		e.parked[id] = p
	}
}
