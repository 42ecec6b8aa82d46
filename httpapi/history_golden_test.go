package httpapi

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"

	"reprise"
	"reprise/retry"
)

// TestHistoryGolden pins the history's JSON of the events whose fields say
// what they hold: a version marker's change, a signal's name, a child's
// final status, and who redrove the run.
func TestHistoryGolden(t *testing.T) {
	t.Parallel()
	var fixed atomic.Bool
	charge := reprise.NewStep("charge", func(ctx context.Context, n int) (int, error) {
		if !fixed.Load() {
			return 0, retry.NewError("CardDeclined", "card declined")
		}
		return n, nil
	}, reprise.WithPolicyText("[retry: 0]"))
	audit := reprise.NewWorkflow("audit", func(ctx context.Context, n int) (int, error) {
		return 0, retry.Permanent(errors.New("audit is down"))
	})
	order := reprise.NewWorkflow("order", func(ctx context.Context, n int) (string, error) {
		v := reprise.Version(ctx, "new-tax", reprise.DefaultVersion, 2)
		by, err := reprise.WaitSignal[string](ctx, "approve").Get(ctx)
		if err != nil {
			return "", err
		}
		if _, err := reprise.Child(ctx, audit, n).Get(ctx); err == nil {
			return "", errors.New("the audit did not fail")
		}
		if _, err := reprise.Step(ctx, charge, n); err != nil {
			return "", err
		}
		return by + " approved version " + strconv.Itoa(v), nil
	})
	env, s := fakeServer(t, &reprise.Config{WorkerID: "engine-1"}, order, audit, charge)
	if _, err := order.Start(t.Context(), env.Engine, 7, reprise.WithRunID("order-7")); err != nil {
		t.Fatal(err)
	}
	// The marker is recorded when the workflow first waits; signalling
	// only then keeps the history's order, which the golden file pins.
	env.Settle()
	if status, body := s.call(t, "POST", "/v1/runs/order-7/signals", `{"name": "approve", "payload": "alice"}`); status != 202 {
		t.Fatalf("signal: %d %s", status, body)
	}
	if run := env.Wait("order-7"); run.Status != reprise.RunFailed {
		t.Fatalf("run %s, want failed by charge", run.Status)
	}
	fixed.Store(true)
	if status, body := s.call(t, "POST", "/v1/runs/order-7/redrive", `{"by": "bob"}`); status != 200 {
		t.Fatalf("redrive: %d %s", status, body)
	}
	if run := env.Wait("order-7"); run.Status != reprise.RunCompleted {
		t.Fatalf("run %s after the redrive, want completed", run.Status)
	}
	status, body := s.call(t, "GET", "/v1/runs/order-7/history", "")
	if status != 200 {
		t.Fatalf("history: %d %s", status, body)
	}
	requireGolden(t, "history", body)
}
