package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"reprise"
)

// TestClientStartsUnderTraceParent: the client starts a run under the
// caller's trace context, and the run the API answers with, read back or
// listed, carries it; a run without one has no traceparent at all.
func TestClientStartsUnderTraceParent(t *testing.T) {
	t.Parallel()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	traced := reprise.NewWorkflow("traced", func(_ context.Context, n int) (int, error) { return n, nil })
	s := newTestServer(t, Options{}, traced)
	ctx := t.Context()
	run, created, err := s.c.StartRun(ctx, "traced", json.RawMessage(`1`), "traced-1", WithTraceParent(tp))
	if err != nil || !created || run.TraceParent != tp {
		t.Fatalf("start under %s: %+v, created %v, %v", tp, run, created, err)
	}
	if got, err := s.c.GetRun(ctx, "traced-1"); err != nil || got.TraceParent != tp {
		t.Errorf("get: %+v, %v; want traceparent %s", got, err, tp)
	}
	runs, err := s.c.ListRuns(ctx, nil)
	if err != nil || len(runs) != 1 || runs[0].TraceParent != tp {
		t.Errorf("list: %+v, %v; want one run with traceparent %s", runs, err, tp)
	}

	if _, _, err := s.c.StartRun(ctx, "traced", json.RawMessage(`2`), "plain-1"); err != nil {
		t.Fatal(err)
	}
	status, body := s.call(t, http.MethodGet, "/v1/runs/plain-1", "")
	if status != http.StatusOK || strings.Contains(string(body), "traceparent") {
		t.Errorf("a run started without a trace context: %d %s; want no traceparent", status, body)
	}

	// A bad one is refused before anything is sent.
	if _, _, err := s.c.StartRun(ctx, "traced", nil, "bad-1", WithTraceParent("00-nope")); err == nil ||
		!strings.Contains(err.Error(), "traceparent") {
		t.Errorf("start under a bad traceparent: %v", err)
	}
	if _, err := s.c.GetRun(ctx, "bad-1"); !errors.Is(err, reprise.ErrNotFound) {
		t.Errorf("the run started under a bad traceparent: %v; want none", err)
	}
}
