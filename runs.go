package reprise

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"reprise/store"
)

// A RunOption configures a run at its start.
type RunOption func(*runOptions)

type runOptions struct{ id, traceParent string }

// WithRunID gives the run a caller-chosen id, which makes starting it
// idempotent: a second start with the same id returns the first run.
func WithRunID(id string) RunOption { return func(o *runOptions) { o.id = id } }

// WithTraceParent starts the run in the caller's trace: tp is a W3C
// traceparent ("00-<trace id>-<parent span id>-<flags>"), kept with the
// run (Run.TraceParent) so that every process that executes it continues
// that trace. Without it, a Config.Tracer makes one (see Tracer).
func WithTraceParent(tp string) RunOption { return func(o *runOptions) { o.traceParent = tp } }

// ValidateRunID reports whether id can name a run: 1 to 200 characters
// from letters, digits and "-_.:@".
func ValidateRunID(id string) error {
	if id == "" || len(id) > 200 {
		return fmt.Errorf("run id must have 1 to 200 characters, has %d", len(id))
	}
	for i, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_.:@", c)) {
			return fmt.Errorf("run id has %q at offset %d (allowed: letters, digits, -_.:@)", c, i)
		}
	}
	return nil
}

// StartRun starts a run of the named workflow with a JSON input. created is
// false when a run with the chosen id already existed; that run is
// returned and nothing new starts.
func (e *Engine) StartRun(ctx context.Context, workflow string, input json.RawMessage, opts ...RunOption) (run *Run, created bool, err error) {
	var o runOptions
	for _, opt := range opts {
		opt(&o)
	}
	named := o.id != ""
	if !named {
		o.id = NewRunID()
	} else if err := ValidateRunID(o.id); err != nil {
		return nil, false, err
	}
	if o.traceParent != "" {
		if err := ValidateTraceParent(o.traceParent); err != nil {
			return nil, false, err
		}
	} else if e.cfg.Tracer != nil {
		o.traceParent = e.cfg.Tracer.NewTraceParent(o.id)
	}
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	e.mu.Lock()
	wf := e.workflows[workflow]
	owner := ""
	if e.running {
		owner = e.id
	}
	e.mu.Unlock()
	if wf == nil {
		return nil, false, fmt.Errorf("start run: workflow %q: %w", workflow, ErrNotRegistered)
	}
	counted, existing, err := e.admit(ctx, o.id, named)
	if err != nil || existing != nil {
		return existing, false, err
	}
	p := store.RunCreateParams{ID: o.id, Workflow: workflow, Input: input, Owner: owner, LeaseTTL: e.cfg.RunLeaseTTL,
		TraceParent: o.traceParent}
	if owner != "" {
		res := e.startEager(ctx, wf, p)
		if counted {
			e.settleStart(o.id, res.created && res.queued)
		}
		if !res.fallback {
			return res.run, res.created, res.err
		}
		owner, p.Owner = "", ""
	} else if counted {
		e.settleStart(o.id, false)
	}
	lease, created, err := e.store.RunCreate(ctx, &p)
	if err != nil {
		return nil, false, fmt.Errorf("start run: %w", err)
	}
	switch {
	case created && owner != "":
		e.startReplayer(lease, true, false)
	case created:
		// Run has not started yet, or is starting: claim it as soon as it can.
		e.claimSoon()
	}
	return lease.Run, created, nil
}

// NewRunID returns a fresh run id: the time in milliseconds, so that ids
// sort roughly by age, and 80 random bits.
func NewRunID() string {
	var b [10]byte
	rand.Read(b[:])
	return fmt.Sprintf("r%x-%s", time.Now().UnixMilli(), hex.EncodeToString(b[:]))
}

// GetRun returns a run's current state.
func (e *Engine) GetRun(ctx context.Context, id string) (*Run, error) {
	return e.store.RunGet(ctx, id)
}

// History returns a run's history.
func (e *Engine) History(ctx context.Context, id string) ([]Event, error) {
	return e.store.HistoryList(ctx, &store.HistoryListParams{RunID: id})
}

// CancelRun cancels a run: its timers and pending steps are dropped, running
// attempts are cancelled with cause ErrCancelled and their results
// rejected. Cancelling a finished run returns ErrRunFinished; a reason
// longer than MaxReason, an *ArgumentError.
func (e *Engine) CancelRun(ctx context.Context, id, reason string) error {
	if err := checkText("reason", reason, MaxReason, false); err != nil {
		return fmt.Errorf("cancel run %s: %w", id, err)
	}
	c, err := e.store.RunCancel(ctx, &store.RunCancelParams{ID: id, Reason: reason})
	if err != nil {
		return fmt.Errorf("cancel run %s: %w", id, err)
	}
	e.stopRun(id)
	for _, p := range e.peers() {
		p.stopRun(id)
		for _, run := range c.Descendants {
			p.stopRun(run.ID)
		}
	}
	if c.Run != nil {
		e.cancelled(c.Run)
	}
	e.descendantsCancelled(c.Descendants)
	return nil
}

// descendantsCancelled stops what this engine runs of the runs that the
// store cancelled because an ancestor ended, and reports their ends.
func (e *Engine) descendantsCancelled(runs []*Run) {
	for _, run := range runs {
		e.stopRun(run.ID)
		e.cancelled(run)
	}
}

// cancelled tells the observer that run ended, cancelled.
func (e *Engine) cancelled(run *Run) {
	if e.cfg.Observer != nil {
		e.cfg.Observer.RunEnded(RunEnd{RunID: run.ID, Workflow: run.Workflow, Status: RunCancelled,
			ParentID: run.ParentID, TraceParent: run.TraceParent, Created: run.CreatedAt})
	}
}

// cancelChild cancels a child run that lost a select, on a goroutine that
// Run waits for: the workflow goes on without waiting, and a child already
// finished stays as it is.
func (e *Engine) cancelChild(id string) {
	e.childCancels.Go(func() {
		if err := e.CancelRun(e.storeCtx, id, "lost a select in its parent"); err != nil &&
			!errors.Is(err, ErrRunFinished) && !errors.Is(err, ErrNotFound) {
			e.log.Warn("cancel child run", "run_id", id, "err", err)
		}
	})
}

// stopRun stops what this engine runs for a cancelled run: its attempts,
// its workflow code, resident or parked. The runs below it, which the
// store cancelled with it, are stopped by their own calls (the store names
// them: descendantsCancelled), or hear of it as any run cancelled
// elsewhere does.
func (e *Engine) stopRun(id string) {
	e.mu.Lock()
	r := e.replayers[id]
	for _, a := range e.attempts {
		if a.task.RunID == id {
			a.stop(e, ErrCancelled)
		}
	}
	delete(e.parked, id)
	e.startedLocked(id)
	e.mu.Unlock()
	if r != nil {
		r.stop(ErrCancelled)
	}
	e.wakeWaiters(id, nil)
}

// SignalRun sends a named signal with a payload to a run; the workflow
// takes it with WaitSignal. Signals sent before the wait are kept, in
// order. A finished run gives ErrRunFinished; an empty name, or one longer
// than MaxSignalName, an *ArgumentError.
func (e *Engine) SignalRun(ctx context.Context, runID, name string, payload any) error {
	if err := checkText("name", name, MaxSignalName, true); err != nil {
		return fmt.Errorf("signal run %s: %w", runID, err)
	}
	b, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("signal %s: encode payload: %w", name, err)
	}
	o, err := e.store.SignalSend(ctx, &store.SignalSendParams{RunID: runID, Name: name, Payload: b})
	if err != nil {
		return fmt.Errorf("signal %s to run %s: %w", name, runID, err)
	}
	e.deliver(o)
	return nil
}

// RedriveRun gives a run that failed because a step exhausted its policy a
// second chance, once the cause is fixed: the step gets a fresh attempt
// budget and the workflow goes on from there. by says who, for the
// history (at most MaxReason bytes); earlier attempts stay in it.
func (e *Engine) RedriveRun(ctx context.Context, runID, by string) error {
	if err := checkText("by", by, MaxReason, false); err != nil {
		return fmt.Errorf("redrive run %s: %w", runID, err)
	}
	if _, err := e.store.RunRedrive(ctx, &store.RunRedriveParams{ID: runID, By: by}); err != nil {
		return fmt.Errorf("redrive run %s: %w", runID, err)
	}
	e.claimSoon()
	e.kick() // the step's task is ready again
	return nil
}

// Wait waits until run id has finished and returns it.
func (e *Engine) WaitRun(ctx context.Context, id string) (*Run, error) {
	for {
		ch := make(chan *Run, 1)
		e.mu.Lock()
		e.waiters[id] = append(e.waiters[id], ch)
		_, resident := e.replayers[id]
		e.mu.Unlock()
		// A run this engine executes tells its waiters when it ends, with
		// its final state: no need to read it first.
		if !resident {
			run, err := e.store.RunGet(ctx, id)
			if err == nil && run.Status.Final() {
				e.dropWaiter(id, ch)
				return run, nil
			}
			if err != nil {
				e.dropWaiter(id, ch)
				return nil, err
			}
		}
		// Runs finished by another process are noticed by polling.
		t := e.clock.NewTimer(e.cfg.PollInterval)
		select {
		case run := <-ch:
			t.Stop()
			if run != nil {
				return run, nil
			}
			continue
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			e.dropWaiter(id, ch)
			return nil, context.Cause(ctx)
		}
		e.dropWaiter(id, ch)
	}
}

func (e *Engine) dropWaiter(id string, ch chan *Run) {
	e.mu.Lock()
	defer e.mu.Unlock()
	list := slices.DeleteFunc(e.waiters[id], func(c chan *Run) bool { return c == ch })
	if len(list) == 0 {
		delete(e.waiters, id)
	} else {
		e.waiters[id] = list
	}
}

// wakeWaiters wakes the waiters of a run that ended or that this engine
// stopped executing, with its end state when the caller knows it (else
// nil: they read it).
func (e *Engine) wakeWaiters(id string, run *Run) {
	e.mu.Lock()
	list := e.waiters[id]
	delete(e.waiters, id)
	e.mu.Unlock()
	for _, ch := range list {
		var cp *Run
		if run != nil {
			c := *run
			cp = &c
		}
		ch <- cp
	}
}
