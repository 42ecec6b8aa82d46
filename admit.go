package reprise

import (
	"context"
	"errors"
	"fmt"
)

// Admission. StartRun admits a new run while fewer than MaxPendingRuns of
// the runs started through this engine wait to start: starts under way,
// and runs created with first steps that found no room and wait in the
// queue for a worker. Past it, StartRun returns ErrBusy, so that a burst of
// starts waits in its callers instead of in the queue ahead of work already
// due, and in this engine's memory. A run admitted is never dropped; a
// start whose id exists is never refused (it starts nothing).

// ErrBusy: StartRun refused to start a new run, because too many runs
// started through this engine wait to start (Config.MaxPendingRuns). Try
// again a little later; the HTTP API answers 429 with Retry-After.
var ErrBusy = errors.New("engine busy: too many runs wait to start; try again later")

// admit counts a start of run id towards MaxPendingRuns, or refuses it
// with ErrBusy. A refused start whose id names a run that exists returns
// that run instead (existing), as a start of an existing id does.
// counted says that the start was counted: settleStart must follow.
func (e *Engine) admit(ctx context.Context, id string, named bool) (counted bool, existing *Run, err error) {
	limit := e.cfg.MaxPendingRuns
	if limit < 0 {
		return false, nil, nil
	}
	e.mu.Lock()
	if !e.running {
		e.mu.Unlock()
		return false, nil, nil // created unowned, for whichever engine claims it
	}
	if e.startsUnderWay+len(e.queuedStarts) < limit {
		e.startsUnderWay++
		e.mu.Unlock()
		return true, nil, nil
	}
	e.mu.Unlock()
	if named {
		run, err := e.store.RunGet(ctx, id)
		switch {
		case err == nil:
			return false, run, nil
		case !errors.Is(err, ErrNotFound):
			return false, nil, fmt.Errorf("start run: %w", err)
		}
	}
	return false, nil, fmt.Errorf("start run: %w", ErrBusy)
}

// settleStart ends a counted start: a run created with first steps left in
// the queue (queued) counts on until one of its steps is leased or an
// outcome comes to it (see started).
func (e *Engine) settleStart(id string, queued bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.startsUnderWay--
	if queued && e.running {
		e.queuedStarts[id] = struct{}{}
	}
}

// startedLocked notes that run id has started, if it waited to. e.mu must
// be held.
func (e *Engine) startedLocked(id string) {
	if len(e.queuedStarts) > 0 {
		delete(e.queuedStarts, id)
	}
}
