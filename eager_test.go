package reprise_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"reprise"
)

// TestEagerStartsOfOneID: many starts of one run id at once create it
// once; the eager runners of the others go without a trace, and the
// engine still stops.
func TestEagerStartsOfOneID(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var calls atomic.Int32
	gate := reprise.NewStep("gate", func(ctx context.Context, _ int) (int, error) {
		calls.Add(1)
		<-release
		return 1, nil
	})
	wf := reprise.NewWorkflow("once-eager", func(ctx context.Context, _ int) (int, error) {
		return reprise.Step(ctx, gate, 0)
	})
	env := newEnv(t, nil, wf, gate)
	var created atomic.Int32
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			_, ok, err := env.Engine.StartRun(t.Context(), "once-eager", nil, reprise.WithRunID("same"))
			if err != nil {
				t.Error(err)
			}
			if ok {
				created.Add(1)
			}
		})
	}
	wg.Wait()
	close(release)
	env.Wait("same")
	if created.Load() != 1 || calls.Load() != 1 {
		t.Errorf("created %d times, step ran %d times; want 1 and 1", created.Load(), calls.Load())
	}
	env.Stop() // every eager runner must have ended
}

// TestEagerContinueAsNew: a workflow that continues as new before its
// first wait does it in the transaction that creates its run.
func TestEagerContinueAsNew(t *testing.T) {
	t.Parallel()
	wf := reprise.NewWorkflow("count-up", func(ctx context.Context, n int) (int, error) {
		if n < 3 {
			return 0, reprise.ContinueAsNew(ctx, n+1)
		}
		return n, nil
	})
	env := newEnv(t, nil, wf)
	h, err := wf.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := h.Result(t.Context())
	if err != nil || got != 3 {
		t.Fatalf("result %d, %v; want 3", got, err)
	}
	if run := env.Wait(h.ID); run.Execution != 4 {
		t.Errorf("execution %d, want 4", run.Execution)
	}
}
