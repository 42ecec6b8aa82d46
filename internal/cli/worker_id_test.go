package cli

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reprise"
	"reprise/httpapi"
	"reprise/store"
)

// TestServerRestartedUnderItsWorkerID: a server killed with SIGKILL while
// an HTTP step's attempt runs, under the README's policy, which never
// retries a timeout, is started again on the same database, under the same
// --worker-id or a new one: the attempt the crash cut off fails as
// WorkerLost, not Timeout, is retried, and the run completes long before
// any lease (30 s) would have lapsed. Under the same id the new server
// takes the work back before it claims anything; under a new one, once it
// has seen the dead engine gone at two looks, a PollInterval apart. The
// test logs how long after the new server listened the attempt was failed
// and retried.
func TestServerRestartedUnderItsWorkerID(t *testing.T) {
	t.Parallel()
	for _, st := range []string{"sqlite", "postgres"} {
		for _, restart := range []struct {
			name     string
			id, next []string // the servers' --worker-id flags
		}{
			{"same id", []string{"--worker-id", "pod-0"}, []string{"--worker-id", "pod-0"}},
			{"new id", []string{"--worker-id", "pod-0"}, []string{"--worker-id", "pod-1"}},
		} {
			t.Run(st+"/"+restart.name, func(t *testing.T) {
				t.Parallel()
				testServerRestarted(t, st, restart.id, restart.next)
			})
		}
	}
}

func testServerRestarted(t *testing.T, st string, id, next []string) {
	db := filepath.Join(t.TempDir(), "reprise.db")
	if st == "postgres" {
		db = pgServerDB(t, "reprise_cli_worker_id")
	}
	hang := make(chan struct{})
	endpoint := newStepEndpoint(t, func(_ string, n int, w http.ResponseWriter) {
		if n == 1 {
			<-hang // until the test ends: the server that called is killed
			return
		}
		answer(t, w, `{"success": true, "output": "charged"}`)
	})
	t.Cleanup(func() { close(hang) }) // before the endpoint closes, which waits for it

	first := spawnServer(t, db, id...)
	c := newClient(t, first.url)
	ctx := t.Context()
	err := c.RegisterStep(ctx, httpapi.Step{Name: "charge", Kind: httpapi.KindHTTP, URL: endpoint.URL + "/charge",
		Policy: "[retry: 3, backoff: 1s] [Timeout -> retry: 0] [timeout: 30s]"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.StartStep(ctx, "charge", json.RawMessage(`{"amount": 42}`), "pay-1"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(endpoint.runs("/charge")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the step was not called")
		}
		time.Sleep(10 * time.Millisecond)
	}
	first.kill() // mid-attempt

	restarted := time.Now()
	second := spawnServer(t, db, next...)
	up := time.Now()
	c2 := newClient(t, second.url)
	run := waitRunLong(t, c2, "pay-1")
	if run.Status != store.RunCompleted {
		t.Fatalf("run after the restart: %+v\n%s", run, second.output())
	}
	if took := time.Since(restarted); took > 15*time.Second {
		t.Errorf("the run took %v after the restart: it waited for a lease", took)
	}
	events, err := c2.History(ctx, "pay-1")
	if err != nil {
		t.Fatal(err)
	}
	failed := eventsOf(events, store.EventAttemptFailed)
	if len(failed) != 1 || failed[0].Error.Type != reprise.TypeWorkerLost {
		t.Fatalf("failed attempts %+v, want one WorkerLost", failed)
	}
	started := eventsOf(events, store.EventAttemptStarted)
	if len(started) != 2 || started[0].Worker != id[1] || started[1].Worker != next[1] ||
		started[0].IdempotencyKey != started[1].IdempotencyKey {
		t.Fatalf("attempts %+v, want one by %s and one by %s under one idempotency key", started, id[1], next[1])
	}
	t.Logf("%s: after the new server listened, the cut-off attempt was failed in %v and retried (1 s backoff) in %v",
		t.Name(), failed[0].At.Sub(up).Round(time.Millisecond), started[1].At.Sub(up).Round(time.Millisecond))
}

// TestServerRefusesALiveWorkerID: a second server under the worker id of
// a live one, on one PostgreSQL database, exits with an error that names
// the id, instead of serving beside it.
func TestServerRefusesALiveWorkerID(t *testing.T) {
	t.Parallel()
	db := pgServerDB(t, "reprise_cli_worker_id_live")
	spawnServer(t, db, "--worker-id", "pod-0")
	bin, err := buildReprise()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "server", "--addr", "127.0.0.1:0", "--db", db, "--worker-id", "pod-0")
	cmd.Env = append(cmd.Environ(), "REPRISE_TOKEN=", "REPRISE_TOKENS=")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "pod-0") || !strings.Contains(string(out), "another live engine") {
		t.Fatalf("second server under a live id: %v\n%s", err, out)
	}
}
