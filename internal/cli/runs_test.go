package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reprise"
	"reprise/httpapi"
	"reprise/reprisetest"
	"reprise/sqlite"
	"reprise/store"
)

// show runs reprise show with args and returns its output.
func show(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := Main(append([]string{"show"}, args...), &stdout, &stderr); code != exitOK {
		t.Fatalf("reprise show %s: exit %d: %s", strings.Join(args, " "), code, stderr.String())
	}
	return stdout.String()
}

// TestShowOnADatabase: show says which step failed a run and how, and
// which step a run has waited for for long, reading the database.
func TestShowOnADatabase(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "reprise.db")
	// The runs were written a minute ago.
	ago := func() time.Time { return time.Now().Add(-time.Minute) }
	s, err := sqlite.Open(t.Context(), db, &sqlite.Options{Now: ago})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	create := func(id string) store.RunLease {
		l, _, err := s.RunCreate(ctx, &store.RunCreateParams{ID: id, Workflow: "order", Input: json.RawMessage(`1`),
			Owner: "engine-1", LeaseTTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	failed := create("failed-1")
	runErr := &store.ErrorInfo{Type: "CardDeclined", Message: "card declined", Step: "charge", Position: 2,
		Attempts: 3, Reason: "exhausted"}
	if _, err := s.RunAdvance(ctx, &store.RunAdvanceParams{RunID: "failed-1", Token: failed.Token,
		Finish: &store.RunFinish{Status: store.RunFailed, Error: runErr}}); err != nil {
		t.Fatal(err)
	}
	waiting := create("waiting-1")
	if _, err := s.RunAdvance(ctx, &store.RunAdvanceParams{RunID: "waiting-1", Token: waiting.Token,
		Steps: []store.StepSpec{{Position: 1, Name: "resize", Input: json.RawMessage(`1`), IdempotencyKey: "k"}}}); err != nil {
		t.Fatal(err)
	}
	tasks, err := s.TaskListWaiting(ctx, &store.TaskListWaitingParams{RunID: "waiting-1"})
	if err != nil || len(tasks) != 1 {
		t.Fatalf("waiting tasks: %v, %v", tasks, err)
	}
	since := tasks[0].ReadyAt
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	out := show(t, "failed-1", "--db", db)
	for _, line := range []string{
		"error     CardDeclined: card declined\n",
		"          step charge (position 2), after 3 attempt(s): exhausted\n",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("show of a failed run: %q lacks %q", out, line)
		}
	}
	out = show(t, "waiting-1", "--db", db)
	want := "waiting   step resize (position 1) since " + since.Local().Format(time.RFC3339Nano) + ": " + whyUnclaimed + "\n"
	if !strings.Contains(out, want) {
		t.Errorf("show of a waiting run: %q lacks %q", out, want)
	}
	var run store.Run
	if err := json.Unmarshal([]byte(show(t, "waiting-1", "--db", db, "--json")), &run); err != nil ||
		run.Waiting == nil || run.Waiting.Step != "resize" {
		t.Errorf("show --json: %+v, %v", run, err)
	}
}

// TestShowOnAServer: through a server, show says whether the step a run
// waits for is registered there.
func TestShowOnAServer(t *testing.T) {
	t.Parallel()
	lost := reprise.NewWorkflow("lost", func(ctx context.Context, n int) (int, error) {
		return reprise.Call[int](ctx, "nowhere", n)
	})
	env := reprisetest.New(t, &reprise.Config{UnclaimedAfter: 30 * time.Second}, lost)
	h, err := httpapi.NewHandler(env.Engine, env.Store, httpapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	if _, err := lost.Start(t.Context(), env.Engine, 1, reprise.WithRunID("lost-1")); err != nil {
		t.Fatal(err)
	}
	env.AdvanceUntil(func() bool {
		events := env.History("lost-1")
		return events[len(events)-1].Type == store.EventStepScheduled
	})
	env.Clock.Advance(time.Minute)
	out := show(t, "lost-1", "--server", hs.URL)
	want := "waiting   step nowhere (position 1) since " + reprisetest.Start.Local().Format(time.RFC3339Nano) + ": " +
		reprise.WhyNotRegistered + "\n"
	if !strings.Contains(out, want) {
		t.Errorf("show: %q lacks %q", out, want)
	}
}
