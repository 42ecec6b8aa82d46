package cli

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"reprise/httpapi"
	"reprise/store"
)

// TestServerKilledWithRunsInEveryState kills a server with SIGKILL while
// its runs are in every state a run waits in (a step scheduled and not
// claimed, one leased to a pull worker, one in its backoff, one just
// completed by its worker) and starts it again on the same database: every
// run completes, nothing registered again, and the pull worker's lease,
// which the server's death does not touch, still takes its result.
func TestServerKilledWithRunsInEveryState(t *testing.T) {
	t.Parallel()
	for _, st := range []string{"sqlite", "postgres"} {
		t.Run(st, func(t *testing.T) {
			t.Parallel()
			db := filepath.Join(t.TempDir(), "reprise.db")
			if st == "postgres" {
				db = pgServerDB(t, "reprise_cli_kill_states")
			}
			endpoint := newStepEndpoint(t, func(_ string, n int, w http.ResponseWriter) {
				if n == 1 {
					http.Error(w, "not now", http.StatusServiceUnavailable)
					return
				}
				answer(t, w, `{"success": true, "output": "called"}`)
			})
			first := spawnServer(t, db)
			c := newClient(t, first.url)
			ctx := t.Context()
			for _, s := range []httpapi.Step{
				{Name: "queued", Kind: httpapi.KindPull},
				{Name: "held", Kind: httpapi.KindPull},
				{Name: "done", Kind: httpapi.KindPull},
				{Name: "flaky", Kind: httpapi.KindHTTP, URL: endpoint.URL + "/flaky", Policy: "[retry: 3, backoff: 2s]"},
			} {
				if err := c.RegisterStep(ctx, s); err != nil {
					t.Fatal(err)
				}
			}
			for _, step := range []string{"queued", "held", "done", "flaky"} {
				if _, _, err := c.StartStep(ctx, step, json.RawMessage(`"job"`), "run-"+step); err != nil {
					t.Fatal(err)
				}
			}
			claim := func(c *httpapi.Client, step string) httpapi.Task {
				t.Helper()
				tasks, err := c.Claim(ctx, httpapi.ClaimParams{Worker: "py-1", Steps: []string{step}, Wait: 20 * time.Second})
				if err != nil || len(tasks) != 1 {
					t.Fatalf("claim %s: %v %+v", step, err, tasks)
				}
				return tasks[0]
			}
			held := claim(c, "held")
			done := claim(c, "done")
			waitEvent(t, c, "run-flaky", store.EventAttemptFailed) // in its backoff
			if err := c.Complete(ctx, done.ID, done.Token, json.RawMessage(`"finished"`)); err != nil {
				t.Fatal(err)
			}
			first.kill() // maybe before run-done's workflow took its result

			second := spawnServer(t, db)
			c2 := newClient(t, second.url)
			if err := c2.Complete(ctx, held.ID, held.Token, json.RawMessage(`"finished"`)); err != nil {
				t.Fatalf("the pull worker's result after the restart: %v", err)
			}
			queued := claim(c2, "queued")
			if err := c2.Complete(ctx, queued.ID, queued.Token, json.RawMessage(`"finished"`)); err != nil {
				t.Fatal(err)
			}
			for _, step := range []string{"queued", "held", "done", "flaky"} {
				run := waitRunLong(t, c2, "run-"+step)
				if run.Status != store.RunCompleted {
					t.Errorf("run-%s after the restart: %+v\n%s", step, run, second.output())
				}
			}
			if got := endpoint.runs("/flaky"); len(got) != 2 {
				t.Errorf("the HTTP step was called %d times, want 2", len(got))
			}
		})
	}
}
