package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"reprise"
	"reprise/httpapi"
	"reprise/store"
)

// buildReprise builds the reprise command once per test binary.
var buildReprise = sync.OnceValues(func() (string, error) { return goBuild("reprise/cmd/reprise", "reprise") })

// goBuild builds the command of package pkg into a new temporary
// directory as name, and returns its path.
func goBuild(pkg, name string) (string, error) {
	dir, err := os.MkdirTemp("", name+"-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, name)
	out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		return "", errors.New(string(out))
	}
	return bin, nil
}

// startServer runs the real reprise server binary on a free loopback port
// and a fresh database, and returns its URL; it is stopped with SIGINT,
// and must exit cleanly, when the test ends.
func startServer(t *testing.T, args ...string) string {
	t.Helper()
	return spawnServer(t, filepath.Join(t.TempDir(), "reprise.db"), args...).url
}

func newClient(t *testing.T, url string) *httpapi.Client {
	t.Helper()
	c, err := httpapi.NewClient(url, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitRun waits for a run to finish through the API's long-poll.
func waitRun(t *testing.T, c *httpapi.Client, id string) *store.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		run, err := c.WaitRun(ctx, id, 10*time.Second)
		if err != nil {
			t.Fatalf("wait run %s: %v", id, err)
		}
		if run.Status.Final() {
			return run
		}
	}
}

func eventsOf(events []store.Event, typ store.EventType) []store.Event {
	var out []store.Event
	for _, e := range events {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// TestServerHTTPSteps runs HTTP steps through the real server against an
// endpoint that fails each way an HTTP step's outcome is classified.
func TestServerHTTPSteps(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	keys := map[string][]string{} // path → Idempotency-Key of each attempt
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys[r.URL.Path] = append(keys[r.URL.Path], r.Header.Get("Idempotency-Key"))
		n := len(keys[r.URL.Path])
		mu.Unlock()
		switch r.URL.Path {
		case "/flaky":
			switch n {
			case 1:
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusServiceUnavailable)
			case 2:
				w.WriteHeader(http.StatusServiceUnavailable)
			default:
				answer(t, w, `{"success": true, "output": {"charged": true}}`)
			}
		case "/bad":
			w.WriteHeader(http.StatusBadRequest)
		case "/declined":
			answer(t, w, `{"success": false, "error": {"type": "CardDeclined", "message": "insufficient funds"}}`)
		case "/hang":
			// Read the body, so that the server notices the client leave.
			if _, err := io.Copy(io.Discard, r.Body); err != nil {
				t.Errorf("read a request's body: %v", err)
			}
			<-r.Context().Done()
		}
	}))
	t.Cleanup(endpoint.Close) // after the subtests, which run in parallel
	c := newClient(t, startServer(t))
	ctx := t.Context()
	for name, policy := range map[string]string{
		"flaky":    "[retry: 3, backoff: 100ms]",
		"bad":      "[retry: 3, backoff: 10ms]",
		"declined": "[retry: 3, backoff: 10ms]",
		"hang":     "[retry: 1, backoff: 10ms] [timeout: 300ms]",
	} {
		if err := c.RegisterStep(ctx, httpapi.Step{Name: name, Kind: httpapi.KindHTTP, URL: endpoint.URL + "/" + name, Policy: policy}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.StartStep(ctx, name, json.RawMessage(`{"amount": 42}`), "run-"+name); err != nil {
			t.Fatal(err)
		}
	}
	history := func(t *testing.T, name string) (*store.Run, []store.Event) {
		t.Helper()
		run := waitRun(t, c, "run-"+name)
		events, err := c.History(ctx, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		return run, events
	}

	t.Run("503 twice then 200", func(t *testing.T) {
		t.Parallel()
		run, events := history(t, "flaky")
		if run.Status != store.RunCompleted || string(run.Output) != `{"charged":true}` {
			t.Fatalf("run: %+v", run)
		}
		started, failed := eventsOf(events, store.EventAttemptStarted), eventsOf(events, store.EventAttemptFailed)
		if len(started) != 3 || len(failed) != 2 || len(eventsOf(events, store.EventStepCompleted)) != 1 {
			t.Fatalf("history: %+v", events)
		}
		for _, f := range failed {
			if f.Error == nil || f.Error.Type != "HTTP5xx" || f.RetryAt.IsZero() {
				t.Errorf("attempt %d failed: %+v", f.Attempt, f)
			}
		}
		// Retry-After: 1 raises the first delay (backoff 100 ms) to 1 s,
		// and the retry waits for it; the second is the backoff, 200 ms.
		if failed[0].Delay < time.Second || started[1].At.Sub(failed[0].At) < time.Second {
			t.Errorf("after Retry-After: 1: delay %v, next attempt %v later", failed[0].Delay, started[1].At.Sub(failed[0].At))
		}
		if failed[1].Delay != 200*time.Millisecond {
			t.Errorf("second delay %v, want 200ms", failed[1].Delay)
		}
		scheduled := eventsOf(events, store.EventStepScheduled)[0]
		mu.Lock()
		got := keys["/flaky"]
		mu.Unlock()
		if len(got) != 3 || scheduled.IdempotencyKey == "" {
			t.Fatalf("keys %q, scheduled %+v", got, scheduled)
		}
		for _, k := range got {
			if k != scheduled.IdempotencyKey {
				t.Errorf("Idempotency-Key %q, want %q on every attempt", k, scheduled.IdempotencyKey)
			}
		}
	})
	t.Run("400 is not retried", func(t *testing.T) {
		t.Parallel()
		run, events := history(t, "bad")
		stepFailed := eventsOf(events, store.EventStepFailed)
		if run.Status != store.RunFailed || len(eventsOf(events, store.EventAttemptStarted)) != 1 ||
			len(stepFailed) != 1 || stepFailed[0].Reason != "permanent" || stepFailed[0].Error.Type != "HTTP4xx" {
			t.Errorf("run %+v, history %+v", run, events)
		}
	})
	t.Run("2xx with success false", func(t *testing.T) {
		t.Parallel()
		run, events := history(t, "declined")
		stepFailed := eventsOf(events, store.EventStepFailed)
		if run.Status != store.RunFailed || len(eventsOf(events, store.EventAttemptStarted)) != 1 ||
			len(stepFailed) != 1 || stepFailed[0].Reason != "permanent" || stepFailed[0].Error.Type != "CardDeclined" ||
			!strings.Contains(stepFailed[0].Error.Message, "insufficient funds") {
			t.Errorf("run %+v, history %+v, step error %+v", run, events, stepFailed[0].Error)
		}
	})
	t.Run("hangs past the timeout", func(t *testing.T) {
		t.Parallel()
		run, events := history(t, "hang")
		failed := eventsOf(events, store.EventAttemptFailed)
		stepFailed := eventsOf(events, store.EventStepFailed)
		if run.Status != store.RunFailed || len(failed) != 2 || failed[0].Error.Type != "Timeout" ||
			failed[1].Error.Type != "Timeout" || len(stepFailed) != 1 || stepFailed[0].Reason != "exhausted" {
			t.Errorf("run %+v, history %+v", run, events)
		}
	})
}

// TestServerPullWorkerLosesLease: a worker that sleeps past its lease
// gets 409 for its result, and the attempt is retried as a Timeout.
func TestServerPullWorkerLosesLease(t *testing.T) {
	t.Parallel()
	c := newClient(t, startServer(t, "--lease-ttl", "500ms"))
	ctx := t.Context()
	if err := c.RegisterStep(ctx, httpapi.Step{Name: "slow", Kind: httpapi.KindPull, Policy: "[retry: 2, backoff: 10ms]"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.StartStep(ctx, "slow", json.RawMessage(`"job"`), "pull-1"); err != nil {
		t.Fatal(err)
	}
	claim := func() httpapi.Task {
		t.Helper()
		tasks, err := c.Claim(ctx, httpapi.ClaimParams{Worker: "sleepy", Steps: []string{"slow"}, Wait: 10 * time.Second})
		if err != nil || len(tasks) != 1 {
			t.Fatalf("claim: %v %+v", err, tasks)
		}
		return tasks[0]
	}
	first := claim()
	// The worker stalls past its lease, until the engine records the lapse.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		events, err := c.History(ctx, "pull-1")
		if err != nil {
			t.Fatal(err)
		}
		if len(eventsOf(events, store.EventAttemptFailed)) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lapse of a %v lease was not recorded within 30 s: %+v", time.Until(first.LeaseUntil), events)
		}
	}
	err := c.Complete(ctx, first.ID, first.Token, json.RawMessage(`"late"`))
	var p *httpapi.Problem
	if !errors.As(err, &p) || p.Status != 409 || !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("late complete: %v", err)
	}
	second := claim()
	if second.Attempt != 2 || second.IdempotencyKey != first.IdempotencyKey {
		t.Fatalf("retry: %+v after %+v", second, first)
	}
	if err := c.Complete(ctx, second.ID, second.Token, json.RawMessage(`"done"`)); err != nil {
		t.Fatal(err)
	}
	run := waitRun(t, c, "pull-1")
	events, err := c.History(ctx, "pull-1")
	if err != nil {
		t.Fatal(err)
	}
	failed := eventsOf(events, store.EventAttemptFailed)
	completed := eventsOf(events, store.EventStepCompleted)
	if run.Status != store.RunCompleted || string(run.Output) != `"done"` || len(failed) != 1 ||
		failed[0].Attempt != 1 || failed[0].Error.Type != reprise.TypeWorkerLost || failed[0].RetryAt.IsZero() ||
		len(completed) != 1 || completed[0].Attempt != 2 {
		t.Errorf("run %+v, history %+v", run, events)
	}
}

// TestServerCommands runs the run commands with --server.
func TestServerCommands(t *testing.T) {
	t.Parallel()
	url := startServer(t)
	run := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := Main(append(args, "--server", url), &stdout, &stderr); code != 0 {
			t.Fatalf("reprise %s: exit %d: %s", strings.Join(args, " "), code, stderr.String())
		}
		return stdout.String()
	}
	if out := run("run", "order", "--id", "o1", "--input", `{"id":"A-1","item":"mug","amount_cents":900,"address":"x"}`); !strings.HasPrefix(out, "started o1") {
		t.Errorf("run: %q", out)
	}
	if out := run("run", "order", "--id", "o1"); !strings.HasPrefix(out, "exists o1") {
		t.Errorf("run again: %q", out)
	}
	c := newClient(t, url)
	if r := waitRun(t, c, "o1"); r.Status != store.RunCompleted {
		t.Errorf("order run: %+v", r)
	}
	if out := run("runs"); !strings.Contains(out, "o1") || !strings.Contains(out, "completed") {
		t.Errorf("runs: %q", out)
	}
	if out := run("show", "o1"); !strings.Contains(out, "status    completed") {
		t.Errorf("show: %q", out)
	}
	if out := run("history", "o1"); !strings.Contains(out, "inventory.reserve") {
		t.Errorf("history: %q", out)
	}
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"cancel", "o1", "--server", url}, &stdout, &stderr); code != exitFail || !strings.Contains(stderr.String(), "finished") {
		t.Errorf("cancel of a finished run: %d %q", code, stderr.String())
	}
	stderr.Reset()
	if code := Main([]string{"show", "nope", "--server", url}, &stdout, &stderr); code != exitFail || !strings.Contains(stderr.String(), `no run "nope"`) {
		t.Errorf("show of no run: %d %q", code, stderr.String())
	}
}

func TestServerRefusesExposureWithoutToken(t *testing.T) {
	t.Parallel()
	for addr, ok := range map[string]bool{
		"127.0.0.1:7420": true, "localhost:7420": true, "[::1]:7420": true,
		"0.0.0.0:7420": false, ":7420": false, "192.168.1.2:7420": false, "nocolon": false,
	} {
		if err := checkExposure(addr, nil); (err == nil) != ok {
			t.Errorf("%s without a token: %v", addr, err)
		}
	}
	if err := checkExposure("0.0.0.0:7420", []string{"t"}); err != nil {
		t.Errorf("with a token: %v", err)
	}
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"server", "--addr", "0.0.0.0:0"}, &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), "--token") {
		t.Errorf("exposed server: %d %q", code, stderr.String())
	}
}

func TestServerWritersNeedsPostgres(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"server", "--writers", "-1", "--db", "postgres://db/x"}, "--writers -1 must not be negative"},
		// An --addr refused later, so that a server that took the flag
		// fails at once instead of serving.
		{[]string{"server", "--writers", "1", "--db", filepath.Join(t.TempDir(), "r.db"), "--addr", "nocolon"}, "--writers applies to a postgres:// --db"},
		{[]string{"server", "--writers", "two"}, "--writers"},
	} {
		var stdout, stderr bytes.Buffer
		if code := Main(c.args, &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%q: %d %q, want usage error %q", c.args, code, stderr.String(), c.want)
		}
	}
}
