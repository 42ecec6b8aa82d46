package reprise_test

import (
	"context"
	"testing"
	"time"

	"reprise"
	"reprise/reprisetest"
)

// TestPeersOnOneStore: two engines of one process on one store that sends
// no notices (SQLite here): the step one runs, for a run the other holds,
// reaches that run; a cancel through one stops the other's attempt at once.
func TestPeersOnOneStore(t *testing.T) {
	t.Parallel()
	st := tempStore(t)
	stepDone := make(chan struct{})
	held := make(chan struct{})
	quick := reprise.NewStep("peer-quick", func(ctx context.Context, n int) (int, error) { return n + 1, nil })
	hold := reprise.NewStep("peer-hold", func(ctx context.Context, n int) (int, error) {
		close(held)
		<-ctx.Done()
		close(stepDone)
		return 0, ctx.Err()
	})
	wf := reprise.NewWorkflow("peer-run", func(ctx context.Context, n int) (int, error) {
		n, err := reprise.Step(ctx, quick, n)
		if err != nil || n > 1 {
			return n, err
		}
		return reprise.Step(ctx, hold, n)
	})
	// a runs the workflow and no step; b runs the steps.
	a := reprisetest.Run(t, reprise.Config{Store: st, WorkerID: "peer-a"}, wf)
	reprisetest.Run(t, reprise.Config{Store: st, WorkerID: "peer-b"}, quick, hold)

	done, err := wf.Start(t.Context(), a, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if out, err := done.Result(ctx); err != nil || out != 2 {
		t.Fatalf("run: %d, %v", out, err)
	}

	h, err := wf.Start(t.Context(), a, 0)
	if err != nil {
		t.Fatal(err)
	}
	<-held
	if err := a.CancelRun(t.Context(), h.ID, "stop"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stepDone:
	case <-ctx.Done():
		t.Fatal("the attempt on the other engine runs on after its run was cancelled")
	}
}
