package reprise_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"reprise"
	"reprise/store"
)

func TestRetryIfAndNextDelayAreRecorded(t *testing.T) {
	t.Parallel()
	errQuota := errors.New("quota exceeded")
	picky := reprise.NewStep("picky", func(ctx context.Context, _ int) (int, error) {
		info, _ := reprise.StepInfoFrom(ctx)
		if info.Attempt < 3 {
			return 0, errors.New("flaky")
		}
		return 0, errQuota
	},
		reprise.WithPolicyText("[retry: 10, backoff: 1s]"),
		reprise.WithRetryIf(func(err error) bool { return !errors.Is(err, errQuota) }),
		reprise.WithNextDelay(func(n int, err error) (time.Duration, bool) { return time.Duration(n) * 7 * time.Second, true }),
	)
	wf := reprise.NewWorkflow("hooks", func(ctx context.Context, _ int) (int, error) { return reprise.Step(ctx, picky, 0) })
	env := newEnv(t, nil, wf, picky)
	h, err := wf.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	env.Wait(h.ID)
	var failed []reprise.Event
	for _, ev := range env.History(h.ID) {
		if ev.Type == store.EventAttemptFailed {
			failed = append(failed, ev)
		}
	}
	if len(failed) != 3 {
		t.Fatalf("%d failed attempts, want 3: the predicate stops the third", len(failed))
	}
	for i, f := range failed[:2] {
		if want := time.Duration(i+1) * 7 * time.Second; f.Delay != want || !strings.Contains(f.Rule, reprise.RuleNextDelay) {
			t.Errorf("attempt %d: delay %v rule %q, want %v by the next_delay hook", i+1, f.Delay, f.Rule, want)
		}
	}
	if last := failed[2]; last.Rule != reprise.RuleRetryIf || last.Reason != "permanent" {
		t.Errorf("last attempt: rule %q reason %q, want the predicate and permanent", last.Rule, last.Reason)
	}
}

func TestSagaCompensatesInReverse(t *testing.T) {
	t.Parallel()
	do := reprise.NewStep("do", func(ctx context.Context, s string) (string, error) { return s, nil })
	var undone []string
	undo := reprise.NewStep("undo", func(ctx context.Context, s string) (string, error) {
		info, _ := reprise.StepInfoFrom(ctx)
		if s == "b" && info.Attempt == 1 {
			return "", errors.New("undo of b fails once")
		}
		undone = append(undone, s)
		return s, nil
	}, reprise.WithPolicyText("[retry: 2, backoff: 1s]"))
	fail := reprise.NewStep("fail", func(ctx context.Context, _ string) (string, error) {
		return "", reprise.Permanent(errors.New("out of stock"))
	})
	wf := reprise.NewWorkflow("saga", func(ctx context.Context, _ int) (string, error) {
		var saga reprise.Saga
		for _, s := range []string{"a", "b", "c"} {
			if _, err := reprise.Step(ctx, do, s); err != nil {
				return "", err
			}
			reprise.OnFailure(&saga, undo, s)
		}
		if _, err := reprise.Step(ctx, fail, ""); err != nil {
			return "compensated", saga.Compensate(ctx)
		}
		return "done", nil
	})
	env := newEnv(t, nil, wf, do, undo, fail)
	h, err := wf.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	env.Wait(h.ID)
	got, err := h.Result(t.Context())
	if err != nil || got != "compensated" || strings.Join(undone, "") != "cba" {
		t.Fatalf("result %q, %v, undone %v; want compensated, c b a", got, err, undone)
	}
}
