package reprisetest_test

import (
	"context"
	"testing"
	"time"

	"reprise"
	"reprise/reprisetest"
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
