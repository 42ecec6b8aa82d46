package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"reprise/httpapi"
	"reprise/store"
)

// TestServerShutdownUnderLoad: a server with --shutdown-grace 2s, its
// HTTP step's endpoint hanging on every call and clients starting runs
// as fast as they can, gets SIGTERM. It exits cleanly within the grace
// and a margin for a loaded machine, though neither the attempts nor the
// clients would end on their own; every run a client was told was
// created is in the database, and a server started again on it finishes
// them.
func TestServerShutdownUnderLoad(t *testing.T) {
	t.Parallel()
	const grace = 2 * time.Second
	db := filepath.Join(t.TempDir(), "reprise.db")
	hang := make(chan struct{})
	release := sync.OnceFunc(func() { close(hang) })
	endpoint := newStepEndpoint(t, func(_ string, _ int, w http.ResponseWriter) {
		<-hang
		answer(t, w, `{"success": true, "output": "ok"}`)
	})
	t.Cleanup(release) // before the endpoint closes, which waits for its calls

	srv := spawnServer(t, db, "--shutdown-grace", grace.String())
	c := newClient(t, srv.url)
	ctx := t.Context()
	err := c.RegisterStep(ctx, httpapi.Step{Name: "hook", Kind: httpapi.KindHTTP, URL: endpoint.URL + "/hook",
		Policy: "[retry: 3, backoff: 1s] [timeout: 1m]"})
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var created []string
	stop := make(chan struct{})
	var clients sync.WaitGroup
	for i := range 8 {
		clients.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("c%d-%d", i, n)
				if _, _, err := c.StartStep(ctx, "hook", json.RawMessage(`{}`), id); err != nil {
					continue // refused as busy, or the server is going away
				}
				mu.Lock()
				created = append(created, id)
				mu.Unlock()
			}
		})
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(endpoint.runs("/hook")) < 50 {
		if time.Now().After(deadline) {
			t.Fatal("the step was not called")
		}
		time.Sleep(10 * time.Millisecond)
	}

	signalled := time.Now()
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	srv.dead = true
	if err := <-srv.done; err != nil {
		t.Fatalf("server exit: %v\n%s", err, srv.output())
	}
	took := time.Since(signalled)
	close(stop)
	clients.Wait()
	t.Logf("exited %v after SIGTERM, with %d runs created", took.Round(time.Millisecond), len(created))
	if margin := 3 * time.Second; took > grace+margin {
		t.Errorf("the server took %v to exit, past its %v grace and a %v margin\n%s", took, grace, margin, srv.output())
	}

	release()
	again := spawnServer(t, db)
	c2 := newClient(t, again.url)
	for _, id := range created {
		if run := waitRunLong(t, c2, id); run.Status != store.RunCompleted {
			t.Fatalf("run %s after the restart: %+v", id, run)
		}
	}
}
