package cli

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"reprise/httpapi"
	"reprise/store"
)

// TestCancelThroughAnotherServer: two servers on one PostgreSQL database;
// a run whose HTTP step hangs in one is cancelled through the other, and
// the step's request is cut at once: the server that runs it hears of the
// cancel, not at the attempt's next heartbeat (a third of --lease-ttl,
// 20 s here).
func TestCancelThroughAnotherServer(t *testing.T) {
	t.Parallel()
	db := pgServerDB(t, "reprise_cli_cancel_elsewhere")
	entered, cut := make(chan struct{}, 1), make(chan struct{}, 1)
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The server hears the client go only once it has read the body.
		_, _ = io.Copy(io.Discard, r.Body)
		entered <- struct{}{}
		<-r.Context().Done()
		cut <- struct{}{}
	}))
	t.Cleanup(endpoint.Close)
	servers := map[string]*serverProc{
		"server-a": spawnServer(t, db, "--worker-id", "server-a", "--lease-ttl", "1m"),
		"server-b": spawnServer(t, db, "--worker-id", "server-b", "--lease-ttl", "1m"),
	}
	a := newClient(t, servers["server-a"].url)
	ctx := t.Context()
	if err := a.RegisterStep(ctx, httpapi.Step{Name: "hang", Kind: httpapi.KindHTTP, URL: endpoint.URL,
		Policy: "[retry: 0] [timeout: 5m]"}); err != nil {
		t.Fatal(err)
	}
	run, _, err := a.StartStep(ctx, "hang", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the step's attempt never reached the endpoint")
	}
	events, err := a.History(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	var runs string
	for _, ev := range events {
		if ev.Type == store.EventAttemptStarted {
			runs = ev.Worker
		}
	}
	other := "server-a"
	if runs == "server-a" {
		other = "server-b"
	}
	if err := newClient(t, servers[other].url).CancelRun(ctx, run.ID, "elsewhere"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cut:
	case <-time.After(10 * time.Second):
		t.Fatalf("the attempt in %s still runs 10 s after %s cancelled its run", runs, other)
	}
}
