package reprise

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"reprise/retry"
)

// A WorkflowDef is a registered workflow: a Go function that orchestrates
// steps. Its code must be deterministic: it may branch on step results,
// Now and its input, but not on the wall clock, randomness or goroutines of
// its own. Run steps in parallel with Go and Select instead.
type WorkflowDef[I, O any] struct {
	name string
	fn   func(context.Context, I) (O, error)
}

// NewWorkflow defines a workflow.
func NewWorkflow[I, O any](name string, fn func(context.Context, I) (O, error)) *WorkflowDef[I, O] {
	return &WorkflowDef[I, O]{name: name, fn: fn}
}

// Name returns the workflow's name.
func (w *WorkflowDef[I, O]) Name() string { return w.name }

func (w *WorkflowDef[I, O]) entry() (any, error) {
	fn := w.fn
	return &workflowEntry{name: w.name, run: func(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
		var in I
		if err := unmarshalInput(raw, &in); err != nil {
			return nil, fmt.Errorf("decode input of workflow %s: %w", w.name, err)
		}
		out, err := fn(ctx, in)
		if err != nil {
			return nil, err
		}
		return json.Marshal(out)
	}}, nil
}

// Start starts a run of w with input in. With WithRunID, starting the same
// id twice returns the first run.
func (w *WorkflowDef[I, O]) Start(ctx context.Context, e *Engine, in I, opts ...RunOption) (*Handle[O], error) {
	input, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("encode input of workflow %s: %w", w.name, err)
	}
	run, _, err := e.StartRun(ctx, w.name, input, opts...)
	if err != nil {
		return nil, err
	}
	return &Handle[O]{ID: run.ID, e: e}, nil
}

// Run starts a run of w and waits for its result.
func (w *WorkflowDef[I, O]) Run(ctx context.Context, e *Engine, in I, opts ...RunOption) (O, error) {
	h, err := w.Start(ctx, e, in, opts...)
	if err != nil {
		var zero O
		return zero, err
	}
	return h.Result(ctx)
}

type workflowEntry struct {
	name string
	run  func(ctx context.Context, input json.RawMessage) (json.RawMessage, error)
}

// A Handle refers to a run whose result has type O.
type Handle[O any] struct {
	ID string
	e  *Engine
}

// Result waits for the run to finish and returns its result: the output of
// a completed run, a *RunError for a failed one, ErrCancelled for a
// cancelled one. A run failed by a step's StepError gives a RunError that
// wraps it: errors.As(err, &stepErr) finds the step, its attempts and why
// it stopped.
func (h *Handle[O]) Result(ctx context.Context) (O, error) {
	return Await[O](ctx, h.e, h.ID)
}

// Await waits for run id to finish and decodes its result.
func Await[O any](ctx context.Context, e *Engine, id string) (O, error) {
	var out O
	run, err := e.WaitRun(ctx, id)
	if err != nil {
		return out, err
	}
	switch run.Status {
	case RunCompleted:
		if err := unmarshalInput(run.Output, &out); err != nil {
			return out, fmt.Errorf("decode result of run %s: %w", id, err)
		}
		return out, nil
	case RunCancelled:
		return out, fmt.Errorf("run %s: %w", id, ErrCancelled)
	}
	re := &RunError{RunID: id}
	if run.Error != nil {
		re.Type, re.Message, re.StepError = run.Error.Type, run.Error.Message, stepError(run.Error)
	}
	return out, re
}

// A Future is the pending result of a step or timer started with Go or
// After.
type Future[O any] struct {
	f *future
}

// Get waits for the future's outcome. For a step that failed for good the
// error is a *StepError.
func (f *Future[O]) Get(ctx context.Context) (O, error) {
	var out O
	if f.f.err == nil {
		mustReplayer(ctx, "Future.Get").await(f.f)
	}
	if f.f.err != nil {
		return out, f.f.err
	}
	if err := unmarshalInput(f.f.out, &out); err != nil {
		return out, fmt.Errorf("decode result of position %d: %w", f.f.pos, err)
	}
	return out, nil
}

// Done reports whether the outcome is known, without waiting.
func (f *Future[O]) Done() bool { return f.f.done }

func (f *Future[O]) future() *future { return f.f }

// An Awaitable is a future of any type, for Select and WaitAny.
type Awaitable interface{ future() *future }

// Step calls step s with input in and waits for its outcome.
func Step[I, O any](ctx context.Context, s *StepDef[I, O], in I, opts ...StepOption) (O, error) {
	return Go(ctx, s, in, opts...).Get(ctx)
}

// Go schedules step s with input in and returns at once; the step runs in
// parallel with the workflow until Get or Select waits for it.
func Go[I, O any](ctx context.Context, s *StepDef[I, O], in I, opts ...StepOption) *Future[O] {
	return GoCall[O](ctx, s.name, in, opts...)
}

// Call calls the step registered under name (a Go, HTTP or remote step)
// and waits for its outcome.
func Call[O any](ctx context.Context, name string, in any, opts ...StepOption) (O, error) {
	return GoCall[O](ctx, name, in, opts...).Get(ctx)
}

// GoCall is Go for a step known by name.
func GoCall[O any](ctx context.Context, name string, in any, opts ...StepOption) *Future[O] {
	r := mustReplayer(ctx, "Go")
	input, err := json.Marshal(in)
	if err != nil {
		return &Future[O]{f: &future{done: true, err: fmt.Errorf("encode input of step %s: %w", name, err)}}
	}
	return &Future[O]{f: r.scheduleStep(name, input, opts)}
}

// After returns a future that resolves once d has passed, by a durable
// timer: it survives restarts.
func After(ctx context.Context, d time.Duration) *Future[struct{}] {
	return &Future[struct{}]{f: mustReplayer(ctx, "After").scheduleTimer(d)}
}

// Sleep waits d by a durable timer.
func Sleep(ctx context.Context, d time.Duration) error {
	_, err := After(ctx, d).Get(ctx)
	return err
}

// Select waits until one of fs has an outcome and returns its index. When
// several have one, the first recorded in the history wins, so a replay
// picks the same winner. The others lose: they are cancelled, and their
// Get returns ErrStepCancelled. WaitAny waits the same way and cancels
// nothing.
func Select(ctx context.Context, fs ...Awaitable) int {
	r := mustReplayer(ctx, "Select")
	list := futures(fs)
	win := r.await(list...)
	if len(list) > 1 {
		r.cancelLosers(list, win)
	}
	return win
}

// WaitAny waits until one of fs has an outcome and returns its index, as
// Select does: the first outcome recorded in the history wins, so a replay
// picks the same one. Unlike Select it cancels nothing: the others stay in
// flight, for a later Get or WaitAny. The winner stays done, so leave it
// out of the next WaitAny (given it again, WaitAny returns it again at
// once). With no futures, WaitAny returns -1.
//
// A workflow that takes the results of its calls in the order they come:
//
//	pending := []*reprise.Future[Quote]{reprise.Go(ctx, quote, "north"), reprise.Go(ctx, quote, "south")}
//	for len(pending) > 0 {
//		fs := make([]reprise.Awaitable, len(pending))
//		for i, f := range pending {
//			fs[i] = f
//		}
//		i := reprise.WaitAny(ctx, fs...)
//		q, err := pending[i].Get(ctx) // settled: returns at once
//		if err != nil {
//			return nil, err // the run's end drops the calls still in flight
//		}
//		pending = slices.Delete(pending, i, i+1)
//		// act on q
//	}
func WaitAny(ctx context.Context, fs ...Awaitable) int {
	r := mustReplayer(ctx, "WaitAny")
	if len(fs) == 0 {
		return -1
	}
	return r.await(futures(fs)...)
}

// futures returns the futures behind fs.
func futures(fs []Awaitable) []*future {
	list := make([]*future, len(fs))
	for i, f := range fs {
		list[i] = f.future()
	}
	return list
}

// Now returns the workflow's time: the time of the latest history event it
// has consumed. It is the same on every replay.
func Now(ctx context.Context) time.Time {
	r := mustReplayer(ctx, "Now")
	if r.eager != nil || len(r.unrecorded) > 0 {
		// The run's start and a handed result's time are the store's,
		// known once they are recorded.
		r.flush()
	}
	return r.now
}

// RunID returns the id of the run a workflow context belongs to.
func RunID(ctx context.Context) string {
	return mustReplayer(ctx, "RunID").id
}

type replayerKey struct{}

func mustReplayer(ctx context.Context, op string) *replayer {
	r, ok := ctx.Value(replayerKey{}).(*replayer)
	if !ok {
		panic("reprise." + op + " called outside a workflow")
	}
	return r
}

// continueAsNewError is the error a workflow returns to continue as new.
type continueAsNewError struct{ input json.RawMessage }

func (c *continueAsNewError) Error() string { return "continue as new" }

// ContinueAsNew ends the run's current execution and starts a new one,
// under the same run id, with input and an empty history: a long-lived
// workflow's history stays short. Return its result from the workflow:
//
//	return out, reprise.ContinueAsNew(ctx, nextInput)
//
// Results and timers that belong to the old execution never reach the new
// one.
func ContinueAsNew(ctx context.Context, input any) error {
	mustReplayer(ctx, "ContinueAsNew")
	b, err := json.Marshal(input)
	if err != nil {
		return fmt.Errorf("continue as new: encode input: %w", err)
	}
	return &continueAsNewError{input: b}
}

// Version lets workflow code change while runs started under the old code
// replay it: it returns the version of change to follow, between minV (the
// code before the change, DefaultVersion for runs that predate it) and maxV
// (the newest). A run meeting the change for the first time records maxV;
// a replay returns what was recorded.
//
//	if reprise.Version(ctx, "fraud-check", reprise.DefaultVersion, 1) == 1 {
//		reprise.Step(ctx, fraudCheck, order)
//	}
func Version(ctx context.Context, change string, minV, maxV int) int {
	if minV > maxV {
		panic(fmt.Sprintf("reprise.Version(%q): min %d > max %d", change, minV, maxV))
	}
	return mustReplayer(ctx, "Version").version(change, minV, maxV)
}

// DefaultVersion is the version of code written before a change.
const DefaultVersion = -1

// WaitSignal returns a future of the payload of the next signal named name
// sent to the run (Engine.SignalRun). Signals sent before the wait are kept
// in order. Use Select with After for a wait with a timeout. A wait is not
// a step: it is never retried.
func WaitSignal[T any](ctx context.Context, name string) *Future[T] {
	return &Future[T]{f: mustReplayer(ctx, "WaitSignal").waitSignal(name)}
}

// Child starts a run of wf as a child of this one and returns a future of
// its result; a child that fails or is cancelled gives a *ChildError.
// Cancelling the parent cancels its children. The child runs once; use
// ChildRun for a child retried by a policy.
func Child[I, O any](ctx context.Context, wf *WorkflowDef[I, O], in I) *Future[O] {
	r := mustReplayer(ctx, "Child")
	input, err := json.Marshal(in)
	if err != nil {
		return &Future[O]{f: &future{done: true, err: fmt.Errorf("encode input of child %s: %w", wf.name, err)}}
	}
	f, _ := r.startChild(wf.name, input)
	return &Future[O]{f: f}
}

// ChildRun runs wf as a child with a retry policy applied to the child as a
// whole: each attempt is a fresh child run, retried after the policy's
// backoff (a durable timer) while the policy allows. The workflow sees the
// result, or a *StepError naming the child workflow.
func ChildRun[I, O any](ctx context.Context, wf *WorkflowDef[I, O], in I, p retry.Policy) (O, error) {
	start := Now(ctx)
	for attempt := 1; ; attempt++ {
		out, err := Child(ctx, wf, in).Get(ctx)
		if err == nil {
			return out, nil
		}
		d := p.Decide(&retry.Failure{
			Attempt: attempt, Types: retry.TypeChain(err), Permanent: retry.IsPermanent(err),
			RetryAfter: retry.RetryAfterOf(err), Elapsed: Now(ctx).Sub(start), Key: RunID(ctx) + "/" + wf.name,
		})
		if !d.Retry {
			info := errorInfo(err)
			return out, &StepError{Step: wf.name, Attempts: attempt, Reason: d.Reason, Type: info.Type, Message: info.Message}
		}
		if d.Delay > 0 {
			if err := Sleep(ctx, d.Delay); err != nil {
				return out, err
			}
		}
	}
}
