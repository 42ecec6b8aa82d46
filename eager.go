package reprise

import (
	"context"
	"fmt"
	"reprise/store"
	"sync"
	"time"
)

// Eager start: StartRun on an engine that runs the workflow executes the
// workflow's code at once, up to its first wait, and creates the run
// together with what the code scheduled in one store transaction
// (RunCreateParams.First), instead of creating the run and then advancing
// it. The run's first step is then leased to this engine in the
// transaction that creates the run.

// eagerWait is how long StartRun waits for the workflow's code to reach
// its first wait. Code that takes longer (it computes, or blocks on
// something that is not durable) gets its run created without it; the
// run is then claimed and replayed like any other.
const eagerWait = 250 * time.Millisecond

// A birth is an eager start waiting for its runner to create the run.
type birth struct {
	ctx    context.Context // StartRun's: the create is its call
	params store.RunCreateParams
	done   chan birthResult // the create's outcome, sent once

	mu    sync.Mutex
	state birthState
}

type birthState uint8

const (
	birthWaiting   birthState = iota // the code runs towards its first wait
	birthCreating                    // the runner is creating the run
	birthAbandoned                   // StartRun gave up waiting
)

// A birthResult is what StartRun returns, unless fallback says that the
// runner stopped before creating the run: StartRun then creates it.
type birthResult struct {
	run      *Run
	created  bool
	err      error
	fallback bool
}

// begin moves the birth to creating, unless StartRun abandoned it.
func (b *birth) begin() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == birthAbandoned {
		return false
	}
	b.state = birthCreating
	return true
}

// abandon gives up waiting, unless the runner is already creating the run.
func (b *birth) abandon() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == birthCreating {
		return false
	}
	b.state = birthAbandoned
	return true
}

// startEager runs the workflow's code and creates the run with its first
// advance. A result with fallback set says that StartRun must create the
// run itself, unowned, for a claim to replay it.
func (e *Engine) startEager(ctx context.Context, wf *workflowEntry, p store.RunCreateParams) birthResult {
	b := &birth{ctx: ctx, params: p, done: make(chan birthResult, 1)}
	r := newRunner(e, store.RunLease{Run: &Run{ID: p.ID, Workflow: p.Workflow, Input: p.Input, Execution: 1}}, wf)
	r.birth = b
	e.mu.Lock()
	if !e.running {
		e.mu.Unlock()
		return birthResult{fallback: true}
	}
	e.runnersWG.Add(1)
	e.mu.Unlock()
	e.launch(r, true)

	t := time.NewTimer(eagerWait)
	defer t.Stop()
	select {
	case res := <-b.done:
		return res
	case <-t.C:
		if b.abandon() {
			return birthResult{fallback: true}
		}
	case <-ctx.Done():
		if b.abandon() {
			return birthResult{err: context.Cause(ctx)}
		}
	}
	return <-b.done // the runner is creating the run
}

// create creates the run of an eager start with the workflow's first
// advance: the buffered commands, and finish if the code already ended.
// ok is false when there is no run for this runner to go on with (it
// exists already, the store failed, or StartRun gave up waiting); the
// runner must then exit without a trace.
func (r *runner) create(finish *store.RunFinish) (adv *store.Advanced, ok bool) {
	b := r.birth
	if !b.begin() {
		r.birth = nil
		return nil, false
	}
	e := r.e
	p := b.params
	var reserved []string
	if finish != nil {
		// As a run's end always does, it drops what the code scheduled
		// and did not wait for.
		p.First = &store.RunAdvanceParams{Cancels: r.cancels, Finish: finish}
	} else {
		reserved = e.reserve(r.steps)
		p.First = &store.RunAdvanceParams{
			Steps: r.steps, Timers: r.timers, Markers: r.markers, Children: r.children, Cancels: r.cancels,
			LeaseOwner: e.id, LeaseTTL: e.cfg.LeaseTTL,
		}
	}
	lease, created, err := e.store.RunCreate(b.ctx, &p)
	r.birth = nil // StartRun gets its answer now, and only once
	if err != nil || !created {
		e.unreserve(reserved)
		if err != nil {
			err = fmt.Errorf("start run: %w", err)
		}
		b.done <- birthResult{run: lease.Run, created: created, err: err}
		return nil, false
	}
	r.token.Store(lease.Token)
	r.created, r.now = lease.Run.CreatedAt, lease.Run.CreatedAt
	if finish == nil {
		e.mu.Lock()
		e.runners[r.id] = r
		e.mu.Unlock()
	}
	b.done <- birthResult{run: lease.Run, created: true}
	if finish == nil {
		r.advanced(lease.Advanced, reserved)
	}
	return lease.Advanced, true
}

// stillborn tells StartRun that the runner stopped before it created the
// run, so that StartRun creates it.
func (r *runner) stillborn() {
	if b := r.birth; b != nil && b.begin() {
		b.done <- birthResult{fallback: true}
	}
}
