package reprise_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"reprise"
)

// logLines collects an engine's log records, as JSON objects.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// with returns the records whose message is msg.
func (l *logLines) with(t *testing.T, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for line := range strings.Lines(l.buf.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// TestStepsNobodyClaimsAreReported: a step that no worker claims for
// UnclaimedAfter is logged once at warn level, and RunWaiting reports it,
// saying whether any step of its name is registered (it used to wait
// without a word).
func TestStepsNobodyClaimsAreReported(t *testing.T) {
	t.Parallel()
	var logs logLines
	cfg := &reprise.Config{
		UnclaimedAfter: 30 * time.Second,
		Logger:         slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	lost := reprise.NewWorkflow("lost", func(ctx context.Context, n int) (int, error) {
		return reprise.Call[int](ctx, "nowhere", n)
	})
	pulled := reprise.NewWorkflow("pulled", func(ctx context.Context, n int) (int, error) {
		return reprise.Call[int](ctx, "resize", n)
	})
	env := newEnv(t, cfg, lost, pulled)
	if err := env.Engine.RegisterRemoteStep("resize", nil); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	hl, err := lost.Start(ctx, env.Engine, 1, reprise.WithRunID("lost-1"))
	if err != nil {
		t.Fatal(err)
	}
	hp, err := pulled.Start(ctx, env.Engine, 1, reprise.WithRunID("pulled-1"))
	if err != nil {
		t.Fatal(err)
	}
	start := env.Clock.Now()

	// Not yet: the steps have just been scheduled.
	for _, id := range []string{hl.ID, hp.ID} {
		if w, err := env.Engine.RunWaiting(ctx, id); err != nil || w != nil {
			t.Fatalf("RunWaiting(%s) at once = %+v, %v; want nil", id, w, err)
		}
	}
	env.AdvanceUntil(func() bool { return len(logs.with(t, "step waits for a worker")) == 2 })
	if waited := env.Clock.Now().Sub(start); waited < 30*time.Second || waited > 40*time.Second {
		t.Errorf("logged after %v, want after 30 s, within a look (7.5 s)", waited)
	}
	wants := map[string]reprise.Waiting{
		hl.ID: {Step: "nowhere", Position: 1, Since: start, Why: reprise.WhyNotRegistered},
		hp.ID: {Step: "resize", Position: 1, Since: start, Why: reprise.WhyNotClaimed},
	}
	for _, rec := range logs.with(t, "step waits for a worker") {
		id, _ := rec["run_id"].(string)
		want, ok := wants[id]
		if !ok || rec["level"] != "WARN" || rec["step"] != want.Step || rec["position"] != 1.0 || rec["why"] != want.Why ||
			rec["since"] != start.Format(time.RFC3339Nano) {
			t.Errorf("log record %v, want run %s waiting for %+v", rec, id, want)
		}
	}
	for id, want := range wants {
		w, err := env.Engine.RunWaiting(ctx, id)
		if err != nil || w == nil || !w.Since.Equal(want.Since) {
			t.Fatalf("RunWaiting(%s) = %+v, %v; want %+v", id, w, err, want)
		}
		w.Since = want.Since
		if *w != want {
			t.Errorf("RunWaiting(%s) = %+v, want %+v", id, *w, want)
		}
	}

	// Once each, however long they wait.
	later := env.Clock.Now().Add(2 * time.Minute)
	env.AdvanceUntil(func() bool { return !env.Clock.Now().Before(later) })
	if n := len(logs.with(t, "step waits for a worker")); n != 2 {
		t.Errorf("%d records after two more minutes, want the same 2", n)
	}

	// A worker claims the pull step: its run waits no more.
	tasks, err := env.Engine.ClaimTasks(ctx, "worker-1", []string{"resize"}, 1)
	if err != nil || len(tasks) != 1 {
		t.Fatalf("claim: %v, %v", tasks, err)
	}
	if w, err := env.Engine.RunWaiting(ctx, hp.ID); err != nil || w != nil {
		t.Errorf("RunWaiting of a claimed step = %+v, %v; want nil", w, err)
	}
}

// TestUnclaimedAfterNegativeReportsNothing: a negative UnclaimedAfter
// turns the reports off.
func TestUnclaimedAfterNegativeReportsNothing(t *testing.T) {
	t.Parallel()
	cfg := &reprise.Config{UnclaimedAfter: -1}
	lost := reprise.NewWorkflow("lost", func(ctx context.Context, n int) (int, error) {
		return reprise.Call[int](ctx, "nowhere", n)
	})
	env := newEnv(t, cfg, lost)
	h, err := lost.Start(t.Context(), env.Engine, 1)
	if err != nil {
		t.Fatal(err)
	}
	later := env.Clock.Now().Add(time.Hour)
	env.Clock.Set(later)
	if w, err := env.Engine.RunWaiting(t.Context(), h.ID); err != nil || w != nil {
		t.Errorf("RunWaiting = %+v, %v; want nil", w, err)
	}
}
