package otel_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"reprise"
	"reprise/otel"
)

type dropSpans struct{}

func (dropSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (dropSpans) Shutdown(context.Context) error                             { return nil }

// BenchmarkOneStepRun is what tracing adds to a one-step run: its trace
// context made, its attempt's context, its ends queued, and the three spans
// (attempt, step, run) made from them and batched to an exporter that
// drops them. The spans are made here, flushed every 128 runs, rather than
// on the timer's goroutine: the time per run is all of it.
func BenchmarkOneStepRun(b *testing.B) {
	tr := otel.New(sdktrace.WithBatcher(dropSpans{}))
	b.Cleanup(func() { _ = tr.Shutdown(context.WithoutCancel(b.Context())) })
	ctx := b.Context()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%128 == 0 {
			_ = tr.ForceFlush(ctx)
		}
		a := reprise.AttemptInfo{RunID: "r19b2c3d4e5f-0123456789abcdef0123", Step: "noop", Attempt: 1, Worker: "host-1-abc",
			Execution: 1, Position: 1, IdempotencyKey: "0123456789abcdef0123456789abcdef", Workflow: "one-step"}
		a.TraceParent = tr.NewTraceParent(a.RunID)
		tr.AttemptStarted(a)
		_, _ = tr.AttemptContext(ctx, a)
		tr.AttemptEnded(reprise.AttemptEnd{AttemptInfo: a, Outcome: reprise.OutcomeOK, Duration: time.Millisecond})
		tr.RunEnded(reprise.RunEnd{RunID: a.RunID, Workflow: a.Workflow, Status: reprise.RunCompleted, TraceParent: a.TraceParent})
	}
}

// BenchmarkChildRun is what tracing adds to a child run beside its own
// spans: its trace context made when its parent starts it, and its run
// span with the parent's step span when it ends.
func BenchmarkChildRun(b *testing.B) {
	tr := otel.New(sdktrace.WithBatcher(dropSpans{}))
	b.Cleanup(func() { _ = tr.Shutdown(context.WithoutCancel(b.Context())) })
	const parent = "r19b2c3d4e5f-0123456789abcdef0123"
	parentTP := tr.NewTraceParent(parent)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%128 == 0 {
			_ = tr.ForceFlush(b.Context())
		}
		tp := tr.ChildTraceParent(parent, parentTP, 1, 2)
		tr.RunEnded(reprise.RunEnd{RunID: parent + "/2", Workflow: "refund", Status: reprise.RunCompleted,
			ParentID: parent, TraceParent: tp})
	}
}
