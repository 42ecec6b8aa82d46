package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reprise"
	"reprise/sqlite"
)

// TestStartWhileBusy: a start the engine refuses as busy is answered 429,
// with Retry-After and a busy problem, which the Go client returns as
// reprise.ErrBusy; a start of an existing id is not refused, and the runs
// admitted complete.
func TestStartWhileBusy(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "reprise.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	release := make(chan struct{})
	held := reprise.NewStep("busy-held", func(ctx context.Context, n int) (int, error) {
		select {
		case <-release:
			return n, nil
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
	})
	wf := reprise.NewWorkflow("busy-one", func(ctx context.Context, n int) (int, error) {
		return reprise.Step(ctx, held, n)
	})
	s := serveEngine(t, reprise.Config{Store: st, MaxConcurrentSteps: 1, MaxPendingRuns: 1, ShutdownGrace: time.Second},
		true, Options{}, wf, held)
	e, c := s.e, s.c

	// Starts made before the engine runs are created for any engine to
	// claim, and not counted: there may be a few.
	var admitted []string
	for i := range 200 {
		id := fmt.Sprint("busy-", i)
		_, _, err := c.StartRun(t.Context(), wf.Name(), []byte("1"), id)
		if errors.Is(err, reprise.ErrBusy) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		admitted = append(admitted, id)
	}
	if len(admitted) == 200 {
		t.Fatal("200 starts admitted; want ErrBusy past MaxPendingRuns")
	}
	body := `{"workflow": "busy-one", "input": 1}`
	resp, err := http.Post(s.url+"/v1/runs", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" ||
		resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("busy start: %d, Retry-After %q, %s; want 429, 1, a problem",
			resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"))
	}
	if _, created, err := c.StartRun(t.Context(), wf.Name(), []byte("1"), admitted[0]); err != nil || created {
		t.Errorf("start of an existing id while busy: %v, created %v; want the run, not created", err, created)
	}
	close(release)
	for _, id := range admitted {
		run, err := e.WaitRun(t.Context(), id)
		if err != nil || run.Status != reprise.RunCompleted {
			t.Errorf("run %s: %v, %v", id, run, err)
		}
	}
}
