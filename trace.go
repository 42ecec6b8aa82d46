package reprise

import (
	"context"
	"errors"
	"fmt"

	"reprise/store"
)

// A Tracer gives runs and attempts their trace contexts, for an Observer
// that emits their spans (package otel implements both). The engine
// knows a trace context only as a W3C traceparent string: it keeps a run's
// with the run (Run.TraceParent), hands an attempt's to its step
// (StepInfo.TraceParent) and to pull workers, and reports the run's with
// every event (AttemptInfo.TraceParent, RunEnd.TraceParent).
//
// An engine with no Tracer makes none of these calls. Like an Observer's,
// a Tracer's methods must be fast and safe for concurrent use.
type Tracer interface {
	// NewTraceParent returns the trace context to keep with a run started
	// without one (WithTraceParent).
	NewTraceParent(runID string) string
	// AttemptContext returns the context attempt a's step runs in, made
	// from ctx (its span, for what the step traces), and the W3C
	// traceparent of the attempt's span, which the step sends on
	// (StepInfo.TraceParent).
	AttemptContext(ctx context.Context, a AttemptInfo) (context.Context, string)
	// AttemptTraceParent returns the traceparent of attempt a's span, for
	// a pull worker that runs it.
	AttemptTraceParent(a AttemptInfo) string
	// ChildTraceParent returns the trace context to keep with the child
	// run that run runID, of trace context traceParent, starts at position
	// of execution: the child's trace is its parent's.
	ChildTraceParent(runID, traceParent string, execution, position int) string
}

// ValidateTraceParent reports whether tp is a W3C traceparent this engine
// keeps: version 00, "00-" then a trace id of 32 lowercase hex digits,
// "-", a parent span id of 16, "-", and 2 of flags; neither id all zeros.
func ValidateTraceParent(tp string) error {
	if len(tp) != 55 || tp[:3] != "00-" || tp[35] != '-' || tp[52] != '-' {
		return fmt.Errorf("traceparent %q is not 00-<32 hex digits>-<16 hex digits>-<2 hex digits>", tp)
	}
	for i, c := range tp {
		if i == 2 || i == 35 || i == 52 {
			continue
		}
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return fmt.Errorf("traceparent %q has %q at offset %d: want a lowercase hex digit", tp, c, i)
		}
	}
	if tp[3:35] == "00000000000000000000000000000000" {
		return errors.New("traceparent has an all-zero trace id")
	}
	if tp[36:52] == "0000000000000000" {
		return errors.New("traceparent has an all-zero parent span id")
	}
	return nil
}

// AttemptTraceParent returns the W3C traceparent of attempt t's span, for
// the pull worker that claimed it (the HTTP API's claim hands it out);
// empty for an engine without a Tracer.
func (e *Engine) AttemptTraceParent(t *store.Task) string {
	if e.cfg.Tracer == nil {
		return ""
	}
	return e.cfg.Tracer.AttemptTraceParent(e.attemptInfo(t))
}

// runTrace returns a run's trace context and workflow: its replayer's
// when this engine executes the run, else the store's (a pull worker's
// step, or an attempt of a run another engine holds). Only an engine with
// a Tracer asks.
func (e *Engine) runTrace(runID string) (traceParent, workflow string) {
	e.mu.Lock()
	r, ctx := e.replayers[runID], e.storeCtx
	e.mu.Unlock()
	if r != nil {
		return r.traceParent, r.workflow.name
	}
	if ctx == nil {
		return "", "" // not running: no store calls yet
	}
	run, err := e.store.RunGet(ctx, runID)
	if err != nil {
		e.log.Debug("read trace context", "run_id", runID, "err", err)
		return "", ""
	}
	return run.TraceParent, run.Workflow
}
