package otel_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"reprise"
	"reprise/otel"
	"reprise/reprisetest"
	"reprise/retry"
)

// The caller's span that TestRetriedStep starts its run under.
const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
	callerTP    = "00-" + callerTrace + "-" + callerSpan + "-01"
)

// orderWorkflow charges, which fails twice before it succeeds, then ships.
func orderDefs(chargeFails int, permanent bool) []reprise.Definition {
	var mu sync.Mutex
	calls := 0
	charge := reprise.NewStep("charge", func(ctx context.Context, n int) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		switch {
		case calls <= chargeFails && permanent:
			return "", retry.Permanent(retry.NewError("CardDeclined", "declined"))
		case calls <= chargeFails:
			return "", retry.NewError("GatewayDown", "try later")
		}
		return fmt.Sprintf("charged %d", n), nil
	}, reprise.WithPolicyText("[retry: 5, backoff: 2s, backoff_kind: fixed]"))
	ship := reprise.NewStep("ship", func(context.Context, string) (string, error) { return "shipped", nil })
	order := reprise.NewWorkflow("order", func(ctx context.Context, n int) (string, error) {
		c, err := reprise.Call[string](ctx, "charge", n)
		if err != nil {
			return "", err
		}
		return reprise.Call[string](ctx, "ship", c)
	})
	return []reprise.Definition{order, charge, ship}
}

// tracing returns a Tracer exporting to an in-memory exporter, set on an
// engine's config, and what it exported: the spans of all that ended so
// far, once flushed.
func tracing(t *testing.T) (*reprise.Config, func() spanList) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tr := otel.New(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tr.Shutdown(context.WithoutCancel(t.Context())) })
	spans := func() spanList {
		if err := tr.ForceFlush(t.Context()); err != nil {
			t.Errorf("flush the spans: %v", err)
		}
		return spanList(exp.GetSpans())
	}
	return &reprise.Config{Tracer: tr, Observer: tr}, spans
}

// A retried step makes a span per attempt, children of the step's span,
// child of the run's, child of the caller's: with the run, the step's
// place, the attempt, the error type and the policy's decision.
func TestRetriedStep(t *testing.T) {
	t.Parallel()
	cfg, spansOf := tracing(t)
	env := reprisetest.New(t, cfg, orderDefs(2, false)...)
	run, _, err := env.Engine.StartRun(t.Context(), "order", []byte("7"), reprise.WithRunID("order-7"),
		reprise.WithTraceParent(callerTP))
	if err != nil {
		t.Fatal(err)
	}
	if run.TraceParent != callerTP {
		t.Fatalf("run's TraceParent = %q, want the caller's %q", run.TraceParent, callerTP)
	}
	env.Wait("order-7")
	env.Settle() // the run's end is reported after it is recorded

	spans := spansOf()
	runSpan := spans.one(t, "run order")
	if runSpan.Parent.SpanID().String() != callerSpan || runSpan.SpanContext.TraceID().String() != callerTrace {
		t.Fatalf("run span's parent = %v, want the caller's span %s in trace %s", runSpan.Parent, callerSpan, callerTrace)
	}
	wantAttrs(t, runSpan, map[string]any{"reprise.run.id": "order-7", "reprise.workflow": "order", "reprise.run.status": "completed"})

	charge := spans.one(t, "step charge")
	if charge.Parent.SpanID() != runSpan.SpanContext.SpanID() {
		t.Fatalf("step span's parent = %v, want the run's span %v", charge.Parent.SpanID(), runSpan.SpanContext.SpanID())
	}
	wantAttrs(t, charge, map[string]any{"reprise.step": "charge", "reprise.step.position": int64(1),
		"reprise.step.status": "completed", "reprise.step.attempts": int64(3), "reprise.workflow": "order"})

	attempts := spans.all("attempt charge")
	if len(attempts) != 3 {
		t.Fatalf("%d attempt spans of charge, want 3: %v", len(attempts), spans.names())
	}
	slices.SortFunc(attempts, func(a, b tracetest.SpanStub) int {
		return int(attr(a, "reprise.attempt").AsInt64() - attr(b, "reprise.attempt").AsInt64())
	})
	key := attr(charge, "reprise.step.idempotency_key").AsString()
	for i, a := range attempts {
		if a.Parent.SpanID() != charge.SpanContext.SpanID() || a.SpanContext.TraceID().String() != callerTrace {
			t.Fatalf("attempt %d: parent %v in trace %v, want the step's span %v in %s", i+1, a.Parent.SpanID(),
				a.SpanContext.TraceID(), charge.SpanContext.SpanID(), callerTrace)
		}
		want := map[string]any{"reprise.run.id": "order-7", "reprise.workflow": "order", "reprise.step": "charge",
			"reprise.step.position": int64(1), "reprise.attempt": int64(i + 1), "reprise.step.idempotency_key": key}
		if i < 2 {
			want["error.type"] = "GatewayDown"
			want["reprise.attempt.outcome"] = "retryable"
			want["reprise.decision"] = "retry"
			want["reprise.retry.delay"] = 2.0
			if a.Status.Code != codes.Error {
				t.Errorf("attempt %d: status %v, want Error", i+1, a.Status)
			}
		} else {
			want["reprise.attempt.outcome"] = "ok"
			for _, k := range []string{"error.type", "reprise.decision"} {
				if v := attr(a, k); v.Type() != attribute.EMPTY {
					t.Errorf("attempt 3 has %s = %v, want none", k, v.String())
				}
			}
		}
		wantAttrs(t, a, want)
	}
	if key == "" {
		t.Fatal("step span has no idempotency key")
	}
	ship := spans.one(t, "step ship")
	if ship.Parent.SpanID() != runSpan.SpanContext.SpanID() {
		t.Fatalf("ship's parent = %v, want the run's span", ship.Parent.SpanID())
	}
	if a := spans.one(t, "attempt ship"); a.Parent.SpanID() != ship.SpanContext.SpanID() {
		t.Fatalf("ship's attempt's parent = %v, want ship's span", a.Parent.SpanID())
	}
	if len(spans) != 7 {
		t.Fatalf("%d spans, want 7 (run, 2 steps, 4 attempts): %v", len(spans), spans.names())
	}
}

// A run started without a trace context gets one, kept with it: a new
// trace, whose root is the run's span. A step the policy stops says why.
func TestNewTraceAndStop(t *testing.T) {
	t.Parallel()
	cfg, spansOf := tracing(t)
	env := reprisetest.New(t, cfg, orderDefs(1, true)...)
	run, _, err := env.Engine.StartRun(t.Context(), "order", []byte("1"), reprise.WithRunID("order-1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := reprise.ValidateTraceParent(run.TraceParent); err != nil {
		t.Fatalf("run started without a trace context: %v", err)
	}
	if end := env.Wait("order-1"); end.Status != reprise.RunFailed {
		t.Fatalf("run ended %s, want failed", end.Status)
	}
	env.Settle()
	stored, err := env.Engine.GetRun(t.Context(), "order-1")
	if err != nil || stored.TraceParent != run.TraceParent {
		t.Fatalf("stored TraceParent = %q (%v), want %q", stored.TraceParent, err, run.TraceParent)
	}

	spans := spansOf()
	runSpan := spans.one(t, "run order")
	if runSpan.Parent.IsValid() {
		t.Fatalf("run span has parent %v, want none: the run is the trace's root", runSpan.Parent)
	}
	if tp := "00-" + runSpan.SpanContext.TraceID().String() + "-" + runSpan.SpanContext.SpanID().String() + "-01"; tp != run.TraceParent {
		t.Fatalf("run span is %s, want the run's TraceParent %s", tp, run.TraceParent)
	}
	if runSpan.Status.Code != codes.Error {
		t.Errorf("failed run's span status = %v, want Error", runSpan.Status)
	}
	a := spans.one(t, "attempt charge")
	wantAttrs(t, a, map[string]any{"reprise.decision": "stop", "reprise.stop.reason": "permanent",
		"error.type": "CardDeclined", "reprise.attempt.outcome": "permanent"})
	wantAttrs(t, spans.one(t, "step charge"), map[string]any{"reprise.step.status": "failed",
		"reprise.stop.reason": "permanent", "error.type": "CardDeclined"})
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3 (run, step, attempt): %v", len(spans), spans.names())
	}
}

// A bad traceparent is refused, and no run starts.
func TestBadTraceParent(t *testing.T) {
	t.Parallel()
	cfg, _ := tracing(t)
	env := reprisetest.New(t, cfg, orderDefs(0, false)...)
	for _, tp := range []string{"01-" + callerTrace + "-" + callerSpan + "-01", "00-" + strings.ToUpper(callerTrace) + "-" + callerSpan + "-01",
		"00-00000000000000000000000000000000-" + callerSpan + "-01", "00-" + callerTrace + "-0000000000000000-01", "garbage"} {
		_, _, err := env.Engine.StartRun(t.Context(), "order", []byte("1"), reprise.WithRunID("bad"), reprise.WithTraceParent(tp))
		if err == nil || !strings.Contains(err.Error(), "traceparent") {
			t.Errorf("StartRun with traceparent %q: err = %v, want one about the traceparent", tp, err)
		}
	}
	if _, err := env.Engine.GetRun(t.Context(), "bad"); !errors.Is(err, reprise.ErrNotFound) {
		t.Fatalf("GetRun after refused starts: %v, want ErrNotFound", err)
	}
}

type spanList []tracetest.SpanStub

func (l spanList) all(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range l {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func (l spanList) one(t *testing.T, name string) tracetest.SpanStub {
	t.Helper()
	got := l.all(name)
	if len(got) != 1 {
		t.Fatalf("%d spans named %q, want 1: %v", len(got), name, l.names())
	}
	return got[0]
}

func (l spanList) names() []string {
	var out []string
	for _, s := range l {
		out = append(out, s.Name)
	}
	return out
}

func attr(s tracetest.SpanStub, key string) attribute.Value {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func wantAttrs(t *testing.T, s tracetest.SpanStub, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if got := attr(s, k).AsInterface(); got != v {
			t.Errorf("span %q: %s = %#v, want %#v", s.Name, k, got, v)
		}
	}
}
