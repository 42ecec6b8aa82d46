package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"reprise"
	"reprise/reprisetest"
	"reprise/retry"
	"reprise/store"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// requireGolden compares a JSON answer, indented, with testdata/NAME.golden
// (go test -update rewrites it).
func requireGolden(t *testing.T, name string, body []byte) {
	t.Helper()
	var got bytes.Buffer
	if err := json.Indent(&got, body, "", "  "); err != nil {
		t.Fatalf("%s: not JSON: %v: %s", name, err, body)
	}
	got.WriteByte('\n')
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("%s differs:\n--- got\n%s--- want\n%s", path, got.Bytes(), want)
	}
}

// fakeServer is the API of an engine on a fake clock (reprisetest).
func fakeServer(t *testing.T, cfg *reprise.Config, defs ...reprise.Definition) (*reprisetest.Env, *testServer) {
	t.Helper()
	env := reprisetest.New(t, cfg, defs...)
	h, err := NewHandler(env.Engine, env.Store, Options{})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	c, err := NewClient(hs.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return env, &testServer{e: env.Engine, st: env.Store, c: c, url: hs.URL, handle: h}
}

// TestGetRunFailedByAStep pins the error of a run that a step failed: the
// step's type and message, and which step, after how many attempts, why.
func TestGetRunFailedByAStep(t *testing.T) {
	t.Parallel()
	charge := reprise.NewStep("charge", func(ctx context.Context, _ int) (int, error) {
		return 0, retry.NewError("CardDeclined", "card declined")
	}, reprise.WithPolicyText("[retry: 2, backoff: 1s]"))
	order := reprise.NewWorkflow("order", func(ctx context.Context, n int) (int, error) {
		return reprise.Step(ctx, charge, n)
	})
	env, s := fakeServer(t, nil, order, charge)
	if _, err := order.Start(t.Context(), env.Engine, 7, reprise.WithRunID("order-7")); err != nil {
		t.Fatal(err)
	}
	env.Wait("order-7")
	status, body := s.call(t, "GET", "/v1/runs/order-7", "")
	if status != 200 {
		t.Fatalf("get: %d %s", status, body)
	}
	requireGolden(t, "run_failed", body)

	run, err := s.c.GetRun(t.Context(), "order-7")
	want := store.ErrorInfo{Type: "CardDeclined", Message: "card declined", Step: "charge", Position: 1, Attempts: 3,
		Reason: "exhausted"}
	if err != nil || run.Error == nil || *run.Error != want || run.Waiting != nil {
		t.Errorf("client: %+v, %v; want error %+v", run, err, want)
	}
}

// TestGetRunWaiting pins how a run that waits for a step nobody claims
// says so.
func TestGetRunWaiting(t *testing.T) {
	t.Parallel()
	lost := reprise.NewWorkflow("lost", func(ctx context.Context, n int) (int, error) {
		return reprise.Call[int](ctx, "nowhere", n)
	})
	env, s := fakeServer(t, &reprise.Config{UnclaimedAfter: 30 * time.Second}, lost)
	if _, err := lost.Start(t.Context(), env.Engine, 7, reprise.WithRunID("lost-7")); err != nil {
		t.Fatal(err)
	}
	env.AdvanceUntil(func() bool {
		events := env.History("lost-7")
		return events[len(events)-1].Type == store.EventStepScheduled
	})
	// Not yet for 30 s.
	if _, body := s.call(t, "GET", "/v1/runs/lost-7", ""); !bytes.Contains(body, []byte(`"waiting":null`)) {
		t.Errorf("at once: %s, want waiting null", body)
	}
	env.Clock.Advance(30 * time.Second)
	status, body := s.call(t, "GET", "/v1/runs/lost-7", "")
	if status != 200 {
		t.Fatalf("get: %d %s", status, body)
	}
	requireGolden(t, "run_waiting", body)

	run, err := s.c.GetRun(t.Context(), "lost-7")
	if err != nil || run.Waiting == nil || run.Waiting.Step != "nowhere" || run.Waiting.Why != reprise.WhyNotRegistered {
		t.Errorf("client: %+v, %v", run, err)
	}
	// Lists do not look.
	if _, body := s.call(t, "GET", "/v1/runs", ""); bytes.Contains(body, []byte(`"waiting"`)) {
		t.Errorf("list: %s", body)
	}
}
