package reprise

import (
	"context"
	"time"

	"reprise/store"
)

// kick wakes the dispatcher: tasks or timers may be due. A kick not yet
// taken counts as busy; the dispatcher inherits the count.
func (e *Engine) kick() {
	e.act.add(1)
	select {
	case e.kickc <- struct{}{}:
	default:
		e.act.add(-1)
	}
}

// dispatch is the engine's one scheduling loop. It claims ready tasks of
// the steps this engine runs while it has room, fires due timers and fails
// attempts whose lease lapsed, then sleeps until the store's next due time
// or a kick. No fixed polling interval: a backoff ends when its timer fires.
func (e *Engine) dispatch(ctx context.Context) {
	t := e.clock.NewTimer(time.Hour)
	defer t.Stop()
	var wake store.Wake
	kicked := true
	e.act.add(1) // while it works; a kick it takes hands it the kick's
	for {
		now := e.clock.Now()
		if kicked {
			// Something may be due that the last read did not show: read
			// before writes that would hold the write lock for nothing.
			wake = e.nextWake(ctx, now)
		}
		claimed, acted := false, false
		if due(wake.Timer, now) {
			e.fireTimers(ctx)
			acted = true
		}
		if due(wake.Lease, now) {
			e.reap(ctx)
			acted = true
		}
		if due(wake.Task, now) {
			claimed = e.claimTasks(ctx)
			acted = true
		}
		if acted || !kicked {
			wake = e.nextWake(ctx, now)
		}
		kicked = false
		next := earliest(wake.Timer, wake.Lease)
		if e.hasRoom() {
			next = earliest(next, wake.Task)
		}
		if claimed || (!next.IsZero() && !next.After(e.clock.Now())) {
			if ctx.Err() != nil {
				e.act.add(-1)
				return
			}
			continue
		}
		if next.IsZero() || e.hasPeers() {
			// Peers on this store schedule work that no notice tells of.
			next = earliest(next, e.clock.Now().Add(e.cfg.PollInterval))
		}
		if !t.Stop() {
			select {
			case <-t.C():
			default:
			}
		}
		resetAt(t, next, e.clock)
		e.wakeAt.Store(next.UnixNano())
		e.act.add(-1)
		select {
		case <-ctx.Done():
			return
		case <-e.kickc:
			kicked = true
		case <-t.C():
			e.act.add(1)
		}
		e.wakeAt.Store(0)
	}
}

// nextWake asks the store when something next becomes due; on an error,
// it says to look again after the poll interval. It asks for the ready
// tasks of the steps that have room only: a step at its concurrency limit
// would have the dispatcher find them due and claim nothing, again and
// again, until the step frees a slot (which kicks it: leaveSlotLocked).
func (e *Engine) nextWake(ctx context.Context, now time.Time) store.Wake {
	wake, err := e.store.NextWake(ctx, &store.NextWakeParams{Steps: e.stepsWithRoom()})
	if err != nil && ctx.Err() == nil {
		e.log.Warn("next wake", "err", err)
		return store.Wake{Task: now.Add(e.cfg.PollInterval)}
	}
	var at int64
	if !wake.Task.IsZero() {
		at = wake.Task.UnixNano()
	}
	e.taskDueAt.Store(at)
	return wake
}

// dueWaiting reports whether a ready task of a step this engine runs is
// due and waits in the queue, as far as the engine knows: the earliest
// ready time of the dispatcher's last look, or of a retry written since,
// has passed.
func (e *Engine) dueWaiting() bool {
	at := e.taskDueAt.Load()
	return at != 0 && at <= e.clock.Now().UnixNano()
}

// retryAt notes a retry that becomes ready at t, for dueWaiting.
func (e *Engine) retryAt(t time.Time) {
	at := t.UnixNano()
	for old := e.taskDueAt.Load(); (old == 0 || at < old) && !e.taskDueAt.CompareAndSwap(old, at); old = e.taskDueAt.Load() {
	}
}

func due(at, now time.Time) bool { return !at.IsZero() && !at.After(now) }

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// watch makes sure the dispatcher looks at the store by a time something
// written becomes due (a lease lapses, a retry is ready): it kicks the
// dispatcher unless it sleeps until no later than that. A dispatcher that
// is awake may have read the store before the write, so it is kicked too.
func (e *Engine) watch(due time.Time) {
	if at := e.wakeAt.Load(); at == 0 || due.UnixNano() < at {
		e.kick()
	}
}

// claimTasks claims as many ready tasks as there is room for and starts
// their attempts. It reports whether it filled its quota, so that the
// caller looks again at once.
func (e *Engine) claimTasks(ctx context.Context) bool {
	e.mu.Lock()
	free := e.roomLocked()
	var quotas []store.StepQuota
	if free > 0 {
		for name, s := range e.steps {
			q := free
			if n := e.stepRoomLocked(s); n >= 0 {
				q = min(q, n)
			}
			if q > 0 {
				quotas = append(quotas, store.StepQuota{Name: name, Limit: q})
			}
		}
	}
	e.mu.Unlock()
	if len(quotas) == 0 {
		return false
	}
	tasks, err := e.store.TaskClaim(ctx, &store.TaskClaimParams{Owner: e.id, Steps: quotas, Limit: free, LeaseTTL: e.cfg.LeaseTTL})
	e.startAttempts(tasks, nil)
	if err != nil {
		if ctx.Err() == nil {
			e.log.Warn("claim tasks", "err", err)
		}
		return false
	}
	want := 0
	for _, q := range quotas {
		want += q.Limit
	}
	return len(tasks) > 0 && len(tasks) >= min(want, free)
}

// fireTimers fires due timers and tells their runs.
func (e *Engine) fireTimers(ctx context.Context) {
	for {
		const batch = 500
		outs, err := e.store.TimerFire(ctx, &store.TimerFireParams{Limit: batch})
		if err != nil {
			if ctx.Err() == nil {
				e.log.Warn("fire timers", "err", err)
			}
			return
		}
		for _, o := range outs {
			e.deliver(o)
		}
		if len(outs) < batch {
			return
		}
	}
}
