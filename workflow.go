package reprise

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
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
// cancelled one.
func (h *Handle[O]) Result(ctx context.Context) (O, error) {
	return Await[O](ctx, h.e, h.ID)
}

// Await waits for run id to finish and decodes its result.
func Await[O any](ctx context.Context, e *Engine, id string) (O, error) {
	var out O
	run, err := e.Wait(ctx, id)
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
		re.Type, re.Message = run.Error.Type, run.Error.Message
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
		mustRunner(ctx, "Future.Get").await(f.f)
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

// An Awaitable is a future of any type, for Select.
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
	r := mustRunner(ctx, "Go")
	input, err := json.Marshal(in)
	if err != nil {
		return &Future[O]{f: &future{done: true, err: fmt.Errorf("encode input of step %s: %w", name, err)}}
	}
	return &Future[O]{f: r.scheduleStep(name, input, opts)}
}

// After returns a future that resolves once d has passed, by a durable
// timer: it survives restarts.
func After(ctx context.Context, d time.Duration) *Future[struct{}] {
	return &Future[struct{}]{f: mustRunner(ctx, "After").scheduleTimer(d)}
}

// Sleep waits d by a durable timer.
func Sleep(ctx context.Context, d time.Duration) error {
	_, err := After(ctx, d).Get(ctx)
	return err
}

// Select waits until one of fs has an outcome and returns its index. When
// several have one, the first recorded in the history wins, so a replay
// picks the same winner.
func Select(ctx context.Context, fs ...Awaitable) int {
	r := mustRunner(ctx, "Select")
	list := make([]*future, len(fs))
	for i, f := range fs {
		list[i] = f.future()
	}
	return r.await(list...)
}

// Now returns the workflow's time: the time of the latest history event it
// has consumed. It is the same on every replay.
func Now(ctx context.Context) time.Time {
	return mustRunner(ctx, "Now").now
}

// RunID returns the id of the run a workflow context belongs to.
func RunID(ctx context.Context) string {
	return mustRunner(ctx, "RunID").id
}

type runnerKey struct{}

func mustRunner(ctx context.Context, op string) *runner {
	r, ok := ctx.Value(runnerKey{}).(*runner)
	if !ok {
		panic("reprise." + op + " called outside a workflow")
	}
	return r
}
