package reprisetest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"reprise"
	"reprise/reprisetest"
	"reprise/store"
)

// TestWaitFailsAtOnceOnAStepNothingRegistered: a run that needs a step no
// Go or remote step of the engine has makes Wait fail at once, saying so,
// also when it is a child run's step (it used to fail after a minute of
// real time with "condition not met").
func TestWaitFailsAtOnceOnAStepNothingRegistered(t *testing.T) {
	t.Parallel()
	lost := reprise.NewWorkflow("lost", func(ctx context.Context, n int) (int, error) {
		return reprise.Call[int](ctx, "nowhere", n)
	})
	parent := reprise.NewWorkflow("parent", func(ctx context.Context, n int) (int, error) {
		if err := reprise.Sleep(ctx, time.Hour); err != nil {
			return 0, err
		}
		return reprise.Child(ctx, lost, n).Get(ctx)
	})
	env := reprisetest.New(t, nil, lost, parent)
	for _, c := range []struct {
		wf   *reprise.WorkflowDef[int, int]
		id   string
		want string
	}{
		{lost, "lost-1", "run lost-1: run lost-1 waits for step nowhere (position 1) ready since 2026-01-01T00:00:00Z: " +
			reprise.WhyNotRegistered},
		{parent, "parent-1", "run parent-1: its child run parent-1/2 waits for step nowhere (position 1) ready since " +
			"2026-01-01T01:00:00Z: " + reprise.WhyNotRegistered},
	} {
		if _, err := c.wf.Start(t.Context(), env.Engine, 1, reprise.WithRunID(c.id)); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		_, err := env.WaitErr(c.id)
		if err == nil || err.Error() != c.want {
			t.Errorf("WaitErr(%s) = %v, want %q", c.id, err, c.want)
		}
		if d := time.Since(began); d > 20*time.Second {
			t.Errorf("WaitErr(%s) took %v", c.id, d)
		}
	}
}

// TestNewMemory: an Env on the memory store runs a workflow to its end as
// one on SQLite does, the clock skipping the retries' backoffs.
func TestNewMemory(t *testing.T) {
	t.Parallel()
	flaky := reprise.NewStep("flaky", func(ctx context.Context, n int) (int, error) {
		if info, _ := reprise.StepInfoFrom(ctx); info.Attempt < 3 {
			return 0, errors.New("not yet")
		}
		return 2 * n, nil
	}, reprise.WithPolicyText("[retry: 5, backoff: 1h]"))
	double := reprise.NewWorkflow("double", func(ctx context.Context, n int) (int, error) {
		return reprise.Step(ctx, flaky, n)
	})
	env := reprisetest.NewMemory(t, nil, double, flaky)
	if _, err := double.Start(t.Context(), env.Engine, 21, reprise.WithRunID("double-1")); err != nil {
		t.Fatal(err)
	}
	run := env.Wait("double-1")
	if run.Status != store.RunCompleted || string(run.Output) != "42" {
		t.Fatalf("run = %+v, want completed with 42", run)
	}
	started := 0
	for _, e := range env.History("double-1") {
		if e.Type == store.EventAttemptStarted {
			started++
		}
	}
	if started != 3 || !env.Clock.Now().After(reprisetest.Start) {
		t.Fatalf("%d attempts started by %v, want 3 after %v", started, env.Clock.Now(), reprisetest.Start)
	}
}
