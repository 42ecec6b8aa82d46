package otel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"reprise"
	"reprise/reprisetest"
)

// childDefs: a workflow that runs a child, which runs a step.
func childDefs() []reprise.Definition {
	credit := reprise.NewStep("credit", func(_ context.Context, n int) (int, error) { return n, nil })
	refund := reprise.NewWorkflow("refund", func(ctx context.Context, n int) (int, error) {
		return reprise.Call[int](ctx, "credit", n)
	})
	order := reprise.NewWorkflow("order", func(ctx context.Context, n int) (int, error) {
		return reprise.Child(ctx, refund, n).Get(ctx)
	})
	return []reprise.Definition{order, refund, credit}
}

// TestChildRunInParentsTrace: a child run is in its parent's trace, its
// run span a child of the parent's step that started it (a span of its
// own, under the parent's run span), and keeps that trace context.
func TestChildRunInParentsTrace(t *testing.T) {
	t.Parallel()
	cfg, spansOf := tracing(t)
	env := reprisetest.New(t, cfg, childDefs()...)
	if _, _, err := env.Engine.StartRun(t.Context(), "order", []byte("7"), reprise.WithRunID("order-7"),
		reprise.WithTraceParent(callerTP)); err != nil {
		t.Fatal(err)
	}
	env.Wait("order-7")
	env.Settle()

	spans := spansOf()
	for _, s := range spans {
		if s.SpanContext.TraceID().String() != callerTrace {
			t.Errorf("span %q in trace %s, want the parent's %s", s.Name, s.SpanContext.TraceID(), callerTrace)
		}
	}
	parent := spans.one(t, "run order")
	step := spans.one(t, "child refund")
	child := spans.one(t, "run refund")
	credit := spans.one(t, "step credit")
	for _, link := range []struct {
		name, parentName string
		got, want        trace.SpanID
	}{
		{"child refund", "run order", step.Parent.SpanID(), parent.SpanContext.SpanID()},
		{"run refund", "child refund", child.Parent.SpanID(), step.SpanContext.SpanID()},
		{"step credit", "run refund", credit.Parent.SpanID(), child.SpanContext.SpanID()},
	} {
		if link.got != link.want {
			t.Errorf("%s's parent = %v, want %s's span %v", link.name, link.got, link.parentName, link.want)
		}
	}
	wantAttrs(t, step, map[string]any{"reprise.run.id": "order-7", "reprise.child.run.id": "order-7/1",
		"reprise.step.status": "completed"})
	wantAttrs(t, child, map[string]any{"reprise.run.id": "order-7/1", "reprise.run.status": "completed"})
	if len(spans) != 5 {
		t.Errorf("%d spans, want 5 (2 runs, the child's step, credit's step and attempt): %v", len(spans), spans.names())
	}

	stored, err := env.Store.RunGet(t.Context(), "order-7/1")
	if err != nil {
		t.Fatal(err)
	}
	if want := "00-" + callerTrace + "-" + step.SpanContext.SpanID().String() + "-01"; stored.TraceParent != want {
		t.Errorf("child's stored TraceParent = %q, want the parent's step %q", stored.TraceParent, want)
	}
}

// TestChildRunWithoutTracer: without a Tracer a child run keeps no trace
// context, though its parent has one.
func TestChildRunWithoutTracer(t *testing.T) {
	t.Parallel()
	env := reprisetest.New(t, &reprise.Config{}, childDefs()...)
	if _, _, err := env.Engine.StartRun(t.Context(), "order", []byte("7"), reprise.WithRunID("order-7"),
		reprise.WithTraceParent(callerTP)); err != nil {
		t.Fatal(err)
	}
	env.Wait("order-7")
	child, err := env.Store.RunGet(t.Context(), "order-7/1")
	if err != nil || child.TraceParent != "" {
		t.Errorf("child run %+v, %v; want one without a trace context", child, err)
	}
}
