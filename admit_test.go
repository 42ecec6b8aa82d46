package reprise_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"reprise"
)

// TestStartsPastMaxPendingRuns: once MaxPendingRuns runs started here wait
// for room to start, StartRun refuses new runs with ErrBusy, never a start
// of an id that exists, and every run it admitted completes; once they
// have started, it admits again.
func TestStartsPastMaxPendingRuns(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	held := reprise.NewStep("admit-held", func(ctx context.Context, n int) (int, error) {
		select {
		case <-release:
			return n, nil
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
	})
	wf := reprise.NewWorkflow("admit-one", func(ctx context.Context, n int) (int, error) {
		return reprise.Step(ctx, held, n)
	})
	env := newEnv(t, &reprise.Config{MaxConcurrentSteps: 1, MaxPendingRuns: 3}, wf, held)
	var admitted []string
	var busy error
	for i := range 20 {
		id := fmt.Sprint("run-", i)
		_, created, err := env.Engine.StartRun(t.Context(), wf.Name(), []byte("1"), reprise.WithRunID(id))
		if err != nil {
			busy = err
			break
		}
		if !created {
			t.Fatalf("run %s not created", id)
		}
		admitted = append(admitted, id)
	}
	if !errors.Is(busy, reprise.ErrBusy) {
		t.Fatalf("after %d starts: %v, want ErrBusy", len(admitted), busy)
	}
	// The engine leases a few first attempts as their runs are created
	// (up to four times its slots); the runs past those wait in the
	// queue, up to the cap.
	if n := len(admitted); n < 1+3 {
		t.Errorf("%d runs admitted, want at least 4: one leased as it was created, 3 waiting", n)
	}
	// A start of an id that exists is not refused: it starts nothing.
	for _, id := range []string{admitted[0], admitted[len(admitted)-1]} {
		run, created, err := env.Engine.StartRun(t.Context(), wf.Name(), []byte("1"), reprise.WithRunID(id))
		if err != nil || created || run.ID != id {
			t.Errorf("start of existing %s while busy: %v, created %v", id, err, created)
		}
	}
	if _, _, err := env.Engine.StartRun(t.Context(), wf.Name(), []byte("1")); !errors.Is(err, reprise.ErrBusy) {
		t.Errorf("start without an id while busy: %v, want ErrBusy", err)
	}
	close(release)
	for _, id := range admitted {
		if run := env.Wait(id); run.Status != reprise.RunCompleted {
			t.Errorf("run %s: %s, want completed", id, run.Status)
		}
	}
	if _, created, err := env.Engine.StartRun(t.Context(), wf.Name(), []byte("1")); err != nil || !created {
		t.Errorf("start once the runs started: %v, created %v", err, created)
	}
}
