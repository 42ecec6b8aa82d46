package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"reprise/sqlite"
	"reprise/store"
)

// TestFlowRunSurvivesKill runs a flow whose foreach has an item in
// backoff, kills reprise flow run with SIGKILL, and runs it again with the
// same run id: the items that completed are not called again, and the one
// in backoff is retried at its planned time.
func TestFlowRunSurvivesKill(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and starts the reprise binary")
	}
	bin, err := buildReprise()
	if err != nil {
		t.Fatalf("build reprise: %v", err)
	}
	var mu sync.Mutex
	calls := map[string]int{} // item → calls
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Input json.RawMessage `json:"input"`
		}
		b, err := io.ReadAll(r.Body)
		if err == nil {
			err = json.Unmarshal(b, &req)
		}
		if err != nil {
			t.Errorf("an item's request: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		calls[string(req.Input)]++
		n := calls[string(req.Input)]
		mu.Unlock()
		if string(req.Input) == "2" && n < 3 {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, `{"success": true, "output": %s}`, req.Input)
	}))
	t.Cleanup(svc.Close)
	count := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]int{}
		for k, v := range calls {
			out[k] = v
		}
		return out
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "reprise.db")
	file := writeFile(t, "crash.yaml", `
flow: crash
steps:
  each:
    foreach: "{{ input }}"
    http: `+svc.URL+`/item
    work_config: {max_retries: 3, backoff: 2500, backoff_type: fixed}
`)
	args := []string{"flow", "run", file, "--db", db, "--id", "crash-1",
		"--worker-id", "flow-crash", "--input", "[0, 1, 2, 3]", "--json"}

	first := exec.Command(bin, args...)
	var firstOut bytes.Buffer
	first.Stdout, first.Stderr = &firstOut, &firstOut
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	// fail kills the first run on the way to the test's failure: its
	// errors would say nothing more.
	fail := func(format string, args ...any) {
		t.Helper()
		_ = first.Process.Kill()
		_ = first.Wait()
		t.Fatalf(format+"\n%s", append(args, firstOut.String())...)
	}
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for c := count(); c["0"] != 1 || c["1"] != 1 || c["3"] != 1 || c["2"] != 1; c = count() {
		if time.Now().After(deadline) {
			fail("the items were not called: %v", c)
		}
		<-tick.C
	}
	// Item 2 waits 2.5 s for its retry: kill the run once the calls'
	// outcomes are recorded, the others' results and item 2's failure.
	lite, err := sqlite.Open(t.Context(), db, nil)
	if err != nil {
		fail("open the database beside the run: %v", err)
	}
	want := fmt.Sprint(map[string]string{"0": "completed", "1": "completed", "2": "failed", "3": "completed"})
	for {
		events, err := lite.HistoryList(t.Context(), &store.HistoryListParams{RunID: "crash-1"})
		if err != nil {
			fail("history: %v", err)
		}
		outcomes := fmt.Sprint(itemOutcomes(events))
		if outcomes == want {
			break
		}
		if time.Now().After(deadline) {
			fail("the calls' outcomes recorded: %s, want %s", outcomes, want)
		}
		<-tick.C
	}
	if err := lite.Close(); err != nil {
		fail("close the database: %v", err)
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		fail("kill the first run: %v", err)
	}
	var exit *exec.ExitError
	if err := first.Wait(); !errors.As(err, &exit) || exit.ExitCode() != -1 {
		t.Fatalf("first run: %v, want it killed\n%s", err, firstOut.String())
	}
	killedAt := time.Now()

	second := exec.Command(bin, args...)
	var stderr bytes.Buffer
	second.Stderr = &stderr
	out, err := second.Output()
	if err != nil {
		t.Fatalf("second run: %v\n%s\n%s", err, stderr.String(), out)
	}
	if want := map[string]int{"0": 1, "1": 1, "2": 3, "3": 1}; fmt.Sprint(count()) != fmt.Sprint(want) {
		t.Errorf("calls per item %v, want %v: completed items are not called again", count(), want)
	}
	var got struct {
		Run struct {
			Status string          `json:"status"`
			Output json.RawMessage `json:"output"`
		} `json:"run"`
		Events []struct {
			Type     string    `json:"type"`
			At       time.Time `json:"at"`
			Position int       `json:"position"`
			Key      string    `json:"idempotency_key"`
			RetryAt  time.Time `json:"retry_at"`
			Attempt  int       `json:"attempt"`
		} `json:"events"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, got.Run.Output); err != nil {
		t.Fatalf("run %s, output %s: %v", got.Run.Status, got.Run.Output, err)
	}
	if got.Run.Status != "completed" || compact.String() != `{"each":[0,1,2,3]}` {
		t.Fatalf("run %s, output %s", got.Run.Status, got.Run.Output)
	}
	// Item 2's retry after the kill starts at the time its failure planned.
	pos := 0
	var retryAt time.Time
	for _, ev := range got.Events {
		switch {
		case ev.Type == "StepScheduled" && len(ev.Key) > 8 && ev.Key[:8] == "each[2]-":
			pos = ev.Position
		case ev.Type == "AttemptFailed" && ev.Position == pos && ev.Attempt == 1:
			retryAt = ev.RetryAt
		case ev.Type == "AttemptStarted" && ev.Position == pos && ev.Attempt == 2:
			if ev.At.Before(retryAt) || ev.At.Sub(retryAt) > 2*time.Second {
				t.Errorf("attempt 2 of item 2 started at %v, planned for %v", ev.At, retryAt)
			}
		}
	}
	if retryAt.IsZero() || !retryAt.After(killedAt.Add(-2500*time.Millisecond)) {
		t.Errorf("item 2's first failure planned its retry for %v", retryAt)
	}
}

// itemOutcomes returns the recorded outcome of each item of the foreach
// each, by item: "completed", or "failed" for a first attempt that failed
// and planned its retry.
func itemOutcomes(events []store.Event) map[string]string {
	items := map[int]string{} // position → item
	outcomes := map[string]string{}
	for _, ev := range events {
		switch item := items[ev.Position]; {
		case ev.Type == store.EventStepScheduled:
			if rest, ok := strings.CutPrefix(ev.IdempotencyKey, "each["); ok {
				items[ev.Position], _, _ = strings.Cut(rest, "]")
			}
		case item == "":
		case ev.Type == store.EventStepCompleted:
			outcomes[item] = "completed"
		case ev.Type == store.EventAttemptFailed && ev.Attempt == 1 && !ev.RetryAt.IsZero():
			outcomes[item] = "failed"
		}
	}
	return outcomes
}
