package reprise

import (
	"context"
	"fmt"
	"time"

	"reprise/store"
)

// The reasons a Waiting gives. An engine knows only the steps registered
// with it: with several processes on one database, another may know a
// step this one does not.
const (
	// WhyNotRegistered: no Go step, HTTP step or remote (pull) step of
	// that name is registered with the engine that looked.
	WhyNotRegistered = "no worker has registered this step here"
	// WhyNotClaimed: the step is registered, and neither the engine (its
	// slots taken) nor a pull worker has claimed it yet.
	WhyNotClaimed = "registered, but no worker has claimed it yet"
)

// HasStep reports whether step name is registered with this engine: a Go
// step it runs (HTTP steps included), or a remote step pull workers claim.
func (e *Engine) HasStep(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.steps[name] != nil || e.remote[name] != nil
}

// why says why a ready task of step waits.
func (e *Engine) why(step string) string {
	if e.HasStep(step) {
		return WhyNotClaimed
	}
	return WhyNotRegistered
}

// RunWaiting returns the step run id has waited for longest, if no engine
// or pull worker has claimed it for Config.UnclaimedAfter, or nil. It is
// one read of the run's tasks.
func (e *Engine) RunWaiting(ctx context.Context, id string) (*Waiting, error) {
	if e.cfg.UnclaimedAfter < 0 {
		return nil, nil
	}
	tasks, err := e.store.TaskListWaiting(ctx, &store.TaskListWaitingParams{RunID: id, ReadyFor: e.cfg.UnclaimedAfter, Limit: 1})
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	if len(tasks) == 0 {
		return nil, nil
	}
	t := tasks[0]
	return &Waiting{Step: t.Step, Position: t.Position, Since: t.ReadyAt, Why: e.why(t.Step)}, nil
}

// Bounds of the watch for tasks that wait: how many it lists at a time,
// and how many of those it logs one by one each time it looks.
const (
	waitingList = 100
	waitingLogs = 10
)

// watchWaiting logs, once each, at warn level, the tasks no engine or
// pull worker has claimed for Config.UnclaimedAfter. It looks every
// quarter of that (at least every second), with one read of the store,
// off the path of claims and attempts.
func (e *Engine) watchWaiting(ctx context.Context) {
	after := e.cfg.UnclaimedAfter
	if after < 0 {
		return
	}
	every := max(after/4, time.Second)
	// logged holds the tasks logged, by id, with the time they became
	// ready: a task that waits again after a claim is logged again.
	logged := make(map[int64]time.Time)
	t := e.clock.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		e.act.add(1)
		logged = e.logWaiting(ctx, after, logged)
		e.act.add(-1)
		t.Reset(every)
	}
}

// logWaiting lists the tasks that wait, logs those not logged yet, and
// returns the tasks logged that still wait.
func (e *Engine) logWaiting(ctx context.Context, after time.Duration, logged map[int64]time.Time) map[int64]time.Time {
	tasks, err := e.store.TaskListWaiting(ctx, &store.TaskListWaitingParams{ReadyFor: after, Limit: waitingList})
	if err != nil {
		if ctx.Err() == nil {
			e.log.Warn("list steps waiting for a worker", "err", err)
		}
		return logged
	}
	still := make(map[int64]time.Time, len(tasks))
	n, more := 0, 0
	for _, t := range tasks {
		still[t.TaskID] = t.ReadyAt
		if at, ok := logged[t.TaskID]; ok && at.Equal(t.ReadyAt) {
			continue
		}
		if n == waitingLogs {
			more++
			continue
		}
		n++
		e.log.Warn("step waits for a worker", "run_id", t.RunID, "step", t.Step, "position", t.Position,
			"since", t.ReadyAt, "why", e.why(t.Step))
	}
	if more > 0 {
		e.log.Warn("more steps wait for a worker", "count", more)
	}
	return still
}
