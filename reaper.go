package reprise

import (
	"context"
	"errors"
	"fmt"

	"reprise/retry"
	"reprise/store"
)

// reap fails attempts whose lease lapsed without a result, as decide
// says: over their timeout (Timeout), or their worker gone (WorkerLost;
// see lapseError), or, lapsed too often in a row, as Poison.
func (e *Engine) reap(ctx context.Context) {
	tasks, err := e.store.TaskListExpired(ctx, &store.TaskListExpiredParams{Limit: 500})
	if err != nil {
		if ctx.Err() == nil {
			e.log.Warn("list expired leases", "err", err)
		}
		return
	}
	for _, t := range tasks {
		pol, _ := e.decodePolicy(t.Policy)
		p := e.decide(t, e.lapseError(t), pol, true)
		o, err := e.store.TaskFail(ctx, p)
		if err != nil {
			if !errors.Is(err, ErrLeaseLost) && ctx.Err() == nil {
				e.log.Warn("fail expired attempt", "run_id", t.RunID, "err", err)
			}
			continue
		}
		if e.cfg.Observer != nil {
			e.cfg.Observer.LeaseLapsed(e.attemptInfo(t))
			e.observeFail(t, retry.NewError(p.Error.Type, p.Error.Message), p)
		}
		e.deliver(o)
	}
}

// lapseError is the error of an attempt whose lease lapsed without a
// result. A lease runs to the attempt's timeout at most, renewed by its
// worker's heartbeats: one that lapsed before the timeout, or that a gone
// engine held, lost its worker (WorkerLost: a crash, a kill, a pull worker
// that stopped heartbeating); one that ran to the timeout with its worker
// live timed out (Timeout).
func (e *Engine) lapseError(t *store.Task) error {
	if t.Timeout > 0 && !t.LeaseUntil.Before(t.StartedAt.Add(t.Timeout)) && !e.lostWorker(t) {
		return retry.NewError(TypeTimeout, fmt.Sprintf("attempt %d exceeded its %v timeout", t.Attempt, t.Timeout))
	}
	who := "its worker"
	if t.Owner != "" {
		who = "its worker " + t.Owner
	}
	return retry.NewError(TypeWorkerLost, fmt.Sprintf(
		"attempt %d lost %s: its lease lapsed without a result (the worker crashed, was killed or stopped heartbeating)", t.Attempt, who))
}
