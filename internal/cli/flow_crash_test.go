package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
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
		b, _ := io.ReadAll(r.Body)
		json.Unmarshal(b, &req)
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
	file := writeFile(t, "crash.yaml", `
flow: crash
steps:
  each:
    foreach: "{{ input }}"
    http: `+svc.URL+`/item
    work_config: {max_retries: 3, backoff: 2500, backoff_type: fixed}
`)
	args := []string{"flow", "run", file, "--db", filepath.Join(dir, "reprise.db"), "--id", "crash-1",
		"--worker-id", "flow-crash", "--input", "[0, 1, 2, 3]", "--json"}

	first := exec.Command(bin, args...)
	var firstOut bytes.Buffer
	first.Stdout, first.Stderr = &firstOut, &firstOut
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		c := count()
		if c["0"] == 1 && c["1"] == 1 && c["3"] == 1 && c["2"] == 1 {
			break
		}
		if time.Now().After(deadline) {
			first.Process.Kill()
			first.Wait()
			t.Fatalf("the items were not called: %v\n%s", c, firstOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // the outcomes are recorded; item 2 waits 2.5 s
	first.Process.Signal(syscall.SIGKILL)
	first.Wait()
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
	json.Compact(&compact, got.Run.Output)
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
