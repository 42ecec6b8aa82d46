package reprise

import (
	"context"
	"fmt"
	"sync"
	"time"

	"reprise/store"
)

// Eager start: StartRun on an engine that runs the workflow executes the
// workflow's code at once, up to its first wait, and creates the run
// together with what the code scheduled in one store transaction
// (RunCreateParams.First), instead of creating the run and then advancing
// it. The run's first step is then leased to this engine in the
// transaction that creates the run. The code runs on a replayer of its
// own; StartRun writes the create, under its ctx.

// eagerWait is how long StartRun waits for the workflow's code to reach
// its first wait. Code that takes longer (it computes, or blocks on
// something that is not durable) gets its run created without it; the
// run is then claimed and replayed like any other.
const eagerWait = 250 * time.Millisecond

// An eagerStart is a StartRun waiting for the workflow's code, on its
// replayer, to reach its first wait.
type eagerStart struct {
	// first carries the code's first advance from the replayer to
	// StartRun, or nil if the replayer stopped before it; created carries
	// the lease of the run created back, or nil for no run (it existed
	// already, or the store failed). Each is sent at most once.
	first   chan *firstAdvance
	created chan *store.RunLease

	mu    sync.Mutex
	state eagerState
}

type eagerState uint8

const (
	eagerRunning   eagerState = iota // the code runs towards its first wait
	eagerCommitted                   // the replayer sends its first advance, or nil
	eagerAbandoned                   // StartRun gave up waiting
)

// A firstAdvance is what the code did up to its first wait, and the room
// reserved for the steps it scheduled (see Engine.reserve).
type firstAdvance struct {
	params   *store.RunAdvanceParams
	reserved []string
}

// An eagerResult is what StartRun returns, unless fallback says that
// StartRun must create the run itself, unowned, for a claim to replay it:
// the code did not reach its first wait in time, or its replayer stopped
// before.
type eagerResult struct {
	run     *Run
	created bool
	// queued says that first steps of the run created were left in the
	// queue: no room to lease them as the run was created.
	queued   bool
	err      error
	fallback bool
}

// commit moves the start to committed, unless StartRun abandoned it.
func (es *eagerStart) commit() bool {
	es.mu.Lock()
	defer es.mu.Unlock()
	if es.state == eagerAbandoned {
		return false
	}
	es.state = eagerCommitted
	return true
}

// abandon gives up waiting, unless the replayer committed.
func (es *eagerStart) abandon() bool {
	es.mu.Lock()
	defer es.mu.Unlock()
	if es.state == eagerCommitted {
		return false
	}
	es.state = eagerAbandoned
	return true
}

// startEager runs the workflow's code on a replayer and creates the run
// with the code's first advance, which the replayer then goes on from.
func (e *Engine) startEager(ctx context.Context, wf *workflowEntry, p store.RunCreateParams) eagerResult {
	es := &eagerStart{first: make(chan *firstAdvance, 1), created: make(chan *store.RunLease, 1)}
	r := newReplayer(e, store.RunLease{Run: &Run{ID: p.ID, Workflow: p.Workflow, Input: p.Input, Execution: 1,
		TraceParent: p.TraceParent}}, wf)
	r.eager = es
	e.mu.Lock()
	if !e.running {
		e.mu.Unlock()
		return eagerResult{fallback: true}
	}
	e.replayersWG.Add(1)
	e.mu.Unlock()
	e.launch(r, true)

	var first *firstAdvance
	t := time.NewTimer(eagerWait)
	defer t.Stop()
	select {
	case first = <-es.first:
	case <-t.C:
		if es.abandon() {
			return eagerResult{fallback: true}
		}
		first = <-es.first // committed: it comes
	case <-ctx.Done():
		if es.abandon() {
			return eagerResult{err: context.Cause(ctx)}
		}
		first = <-es.first
	}
	if first == nil {
		return eagerResult{fallback: true} // the replayer stopped before
	}
	p.First = first.params
	lease, created, err := e.store.RunCreate(ctx, &p)
	if err != nil || !created {
		e.unreserve(first.reserved)
		es.created <- nil
		if err != nil {
			err = fmt.Errorf("start run: %w", err)
		}
		return eagerResult{run: lease.Run, created: created, err: err}
	}
	r.token.Store(lease.Token)
	if p.First.Finish == nil {
		e.mu.Lock()
		e.replayers[r.id] = r
		e.residentAddedLocked()
		e.mu.Unlock()
	}
	es.created <- &lease
	queued := lease.Advanced != nil && len(p.First.Steps) > len(lease.Advanced.Tasks)
	return eagerResult{run: lease.Run, created: true, queued: queued}
}

// create hands the workflow's first advance to StartRun, which creates the
// run with it: the buffered commands, and finish if the code already
// ended. ok is false when there is no run for this replayer to go on with
// (it exists already, the store failed, or StartRun gave up waiting); the
// replayer must then exit without a trace.
func (r *replayer) create(finish *store.RunFinish) (adv *store.Advanced, ok bool) {
	es := r.eager
	r.eager = nil // StartRun gets one answer
	if !es.commit() {
		return nil, false
	}
	e := r.e
	first := &firstAdvance{}
	if finish != nil {
		// As a run's end always does, it drops what the code scheduled
		// and did not wait for, and records its version markers.
		first.params = &store.RunAdvanceParams{Markers: r.markers, Cancels: r.cancels, Finish: finish}
	} else {
		first.reserved = e.reserve(r.steps)
		first.params = &store.RunAdvanceParams{
			Steps: r.steps, Timers: r.timers, Markers: r.markers, Children: r.children, Cancels: r.cancels,
			LeaseOwner: e.id, LeaseTTL: e.cfg.LeaseTTL,
		}
	}
	es.first <- first
	lease := <-es.created
	if lease == nil {
		return nil, false
	}
	r.created, r.now = lease.Run.CreatedAt, lease.Run.CreatedAt
	if finish == nil {
		r.advanced(lease.Advanced, first.reserved)
	}
	return lease.Advanced, true
}

// handBackStart tells StartRun that the replayer stopped before the code's
// first wait, so that StartRun creates the run itself.
func (r *replayer) handBackStart() {
	if es := r.eager; es != nil && es.commit() {
		es.first <- nil
	}
}
