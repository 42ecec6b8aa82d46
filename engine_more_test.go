package reprise_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"reprise/store"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"reprise"
	"reprise/reprisetest"
	"reprise/retry"
)

// gauge tracks how many callers are inside at once, and the most ever.
type gauge struct{ now, peak atomic.Int32 }

func (g *gauge) enter() {
	n := g.now.Add(1)
	for {
		p := g.peak.Load()
		if n <= p || g.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

func (g *gauge) exit() { g.now.Add(-1) }

// TestConcurrencyLimits: neither the engine's nor a step's limit is passed,
// also when retries at once are leased with their predecessors' failures
// and must wait for a slot.
func TestConcurrencyLimits(t *testing.T) {
	t.Parallel()
	for _, fails := range []int{0, 2} {
		t.Run(fmt.Sprintf("fails=%d", fails), func(t *testing.T) {
			t.Parallel()
			testConcurrencyLimits(t, fails)
		})
	}
}

func testConcurrencyLimits(t *testing.T, fails int) {
	var limited, all gauge
	work := func(g ...*gauge) func(context.Context, int) (int, error) {
		return func(ctx context.Context, n int) (int, error) {
			for _, x := range g {
				x.enter()
			}
			time.Sleep(5 * time.Millisecond)
			for _, x := range g {
				x.exit()
			}
			if info, _ := reprise.StepInfoFrom(ctx); info.Attempt <= fails {
				return 0, errors.New("not yet")
			}
			return n, nil
		}
	}
	policy := reprise.WithPolicyText("[retry: 5, backoff: 0s]")
	narrow := reprise.NewStep("narrow", work(&limited, &all), reprise.WithConcurrency(2), policy)
	wide := reprise.NewStep("wide", work(&all), policy)
	wf := reprise.NewWorkflow("fan-out", func(ctx context.Context, _ int) (int, error) {
		var fs []*reprise.Future[int]
		for i := range 12 {
			fs = append(fs, reprise.Go(ctx, narrow, i), reprise.Go(ctx, wide, i))
		}
		sum := 0
		for _, f := range fs {
			n, err := f.Get(ctx)
			if err != nil {
				return 0, err
			}
			sum += n
		}
		return sum, nil
	})
	env := reprisetest.New(t, &reprise.Config{MaxConcurrentSteps: 5}, wf, narrow, wide)
	h, _ := wf.Start(t.Context(), env.Engine, 0)
	env.Wait(h.ID)
	if sum, err := h.Result(t.Context()); err != nil || sum != 2*66 {
		t.Fatalf("result %d, %v", sum, err)
	}
	if p := limited.peak.Load(); p > 2 || p < 1 {
		t.Errorf("narrow ran %d at once, limit 2", p)
	}
	if p := all.peak.Load(); p > 5 || p < 3 {
		t.Errorf("%d steps ran at once, engine limit 5", p)
	}
}

// TestSelectReplaysTheSameWinner: a timer beats a step, which is cancelled;
// after a restart the workflow replays from a history holding both
// outcomes (the timer's, then the cancellation) and must take the timer's
// branch again.
func TestSelectReplaysTheSameWinner(t *testing.T) {
	t.Parallel()
	slow := failsFirst("slow", "step", "[retry: 1, backoff: 10s, backoff_kind: fixed]")
	var gateCalls atomic.Int32
	gate := reprise.NewStep("gate", func(ctx context.Context, _ int) (string, error) {
		if gateCalls.Add(1) == 1 {
			return "", errors.New("closed")
		}
		return "open", nil
	}, reprise.WithPolicyText("[retry: 1, backoff: 1h]"))
	var branches atomic.Int32
	wf := reprise.NewWorkflow("race", func(ctx context.Context, _ int) (string, error) {
		f := reprise.Go(ctx, slow, 0)
		timer := reprise.After(ctx, 5*time.Second)
		winner := "timer"
		if reprise.Select(ctx, f, timer) == 0 {
			winner = "step"
		}
		branches.Add(1)
		at := reprise.Now(ctx).Sub(reprisetest.Start)
		if _, err := reprise.Step(ctx, gate, 0); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s won at +%v", winner, at), nil
	})
	env := reprisetest.New(t, nil, wf, slow, gate)
	h, _ := wf.Start(t.Context(), env.Engine, 0)
	// Let the timer win and the step be cancelled, while the gate waits an hour.
	env.AdvanceUntil(func() bool {
		return gateCalls.Load() == 1 && countEvents(env.History(h.ID), store.EventStepCancelRequested) == 1
	})
	env.Restart(nil, wf, slow, gate)
	env.Wait(h.ID)
	got, err := h.Result(t.Context())
	if err != nil || got[:9] != "timer won" {
		t.Fatalf("result %q, %v; the replay must pick the timer again", got, err)
	}
	if branches.Load() != 2 {
		t.Errorf("the code after the select ran %d times, want 2 (live, then replay)", branches.Load())
	}
	// Now() is the time of the last consumed event, the same on replay.
	if got != "timer won at +5s" {
		t.Errorf("result %q, want the timer's time", got)
	}
}

func TestShutdownGraceThenRetryAfterRestart(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	var causes atomic.Value
	hang := reprise.NewStep("hang", func(ctx context.Context, _ int) (string, error) {
		info, _ := reprise.StepInfoFrom(ctx)
		if info.Attempt == 1 {
			started <- struct{}{}
			<-ctx.Done()
			causes.Store(context.Cause(ctx))
			return "", context.Cause(ctx)
		}
		return "second attempt", nil
	}, reprise.WithPolicyText("[retry: 2, backoff: 1s]"))
	wf := reprise.NewWorkflow("shutdown", func(ctx context.Context, _ int) (string, error) {
		return reprise.Step(ctx, hang, 0)
	})
	cfg := &reprise.Config{ShutdownGrace: 10 * time.Millisecond, LeaseTTL: time.Minute}
	env := reprisetest.New(t, cfg, wf, hang)
	h, _ := wf.Start(t.Context(), env.Engine, 0)
	<-started
	env.Stop()
	if c, _ := causes.Load().(error); !errors.Is(c, reprise.ErrShutdown) {
		t.Fatalf("attempt cancelled with cause %v, want ErrShutdown", c)
	}
	if n := countEvents(env.History(h.ID), store.EventAttemptFailed); n != 0 {
		t.Fatalf("shutdown recorded %d failures; the lease should just lapse", n)
	}
	env.Restart(cfg, wf, hang)
	run := env.Wait(h.ID)
	if run.Status != reprise.RunCompleted {
		t.Fatalf("run %s", run.Status)
	}
	var failed *reprise.Event
	for _, ev := range env.History(h.ID) {
		if ev.Type == store.EventAttemptFailed {
			failed = &ev
		}
	}
	// The step has no timeout: its worker went away.
	if failed == nil || failed.Error.Type != reprise.TypeWorkerLost || failed.RetryAt.IsZero() {
		t.Fatalf("the lapsed lease was recorded as %+v, want WorkerLost and a retry", failed)
	}
}

func TestPerNameDefaultPolicies(t *testing.T) {
	t.Parallel()
	fail := func(ctx context.Context, _ int) (int, error) { return 0, errors.New("no") }
	chat := reprise.NewStep("llm.chat", fail)
	embed := reprise.NewStep("llm.embed", fail)
	tool := reprise.NewStep("tool.search", fail)
	other := reprise.NewStep("other", fail)
	wf := reprise.NewWorkflow("defaults", func(ctx context.Context, _ int) (int, error) {
		reprise.Step(ctx, chat, 0)
		reprise.Step(ctx, embed, 0)
		reprise.Step(ctx, tool, 0)
		reprise.Step(ctx, other, 0)
		reprise.Step(ctx, tool, 0, reprise.WithPolicy(retry.Never)) // the call site wins
		return 0, nil
	})
	def := retry.Attempts(1, retry.None)
	env := reprisetest.New(t, &reprise.Config{
		DefaultPolicy: &def,
		Policies: map[string]retry.Policy{
			"llm.*":    retry.Attempts(3, retry.None),
			"llm.chat": retry.Attempts(4, retry.None),
			"tool.*":   retry.Attempts(2, retry.None),
		},
	}, wf, chat, embed, tool, other)
	h, _ := wf.Start(t.Context(), env.Engine, 0)
	env.Wait(h.ID)
	want := map[int]int{1: 4, 2: 3, 3: 2, 4: 1, 5: 1}
	got := map[int]int{}
	for _, ev := range env.History(h.ID) {
		if ev.Type == store.EventStepFailed {
			got[ev.Position] = ev.Attempt
		}
	}
	for pos, n := range want {
		if got[pos] != n {
			t.Errorf("position %d made %d attempts, want %d", pos, got[pos], n)
		}
	}
}

// TestWaitGivesTheStoredRun: a run this engine executes hands its waiters
// its end state from memory; it must be what the store holds.
func TestWaitGivesTheStoredRun(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	echo := reprise.NewStep("echo", func(ctx context.Context, s string) (string, error) {
		<-release
		return s, nil
	})
	wf := reprise.NewWorkflow("wait-state", func(ctx context.Context, s string) (string, error) {
		out, err := reprise.Step(ctx, echo, s)
		if s == "fail" {
			return "", errors.New("told to fail")
		}
		return out + "!", err
	})
	env := reprisetest.New(t, nil, wf, echo)
	for _, in := range []string{"ok", "fail"} {
		h, err := wf.Start(t.Context(), env.Engine, in)
		if err != nil {
			t.Fatal(err)
		}
		// Wait while the run is resident, so that the end state comes
		// from memory (almost always: the sleep only makes it likely).
		waited := make(chan *reprise.Run, 1)
		go func() {
			run, err := env.Engine.Wait(t.Context(), h.ID)
			if err != nil {
				t.Error(err)
			}
			waited <- run
		}()
		time.Sleep(20 * time.Millisecond)
		release <- struct{}{}
		got := <-waited
		want, err := env.Engine.GetRun(t.Context(), h.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: Wait gave\n%+v\nthe store has\n%+v", in, got, want)
		}
	}
}

// TestHandedResultRefusedReplays: a result handed to the waiting workflow
// is recorded with its next advance; if its lease lapsed meanwhile (the
// workflow's code held on too long), the store refuses it, the attempt
// is retried, and the workflow replays from the history, where the result
// that counts is the retry's.
func TestHandedResultRefusedReplays(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	step := reprise.NewStep("handed", func(ctx context.Context, _ int) (string, error) {
		n := calls.Add(1)
		time.Sleep(100 * time.Millisecond) // the runner is waiting long before
		return fmt.Sprintf("v%d", n), nil
	}, reprise.WithPolicyText("[retry: 3, backoff: 1s] [timeout: 10s]"))
	hold := make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	var held atomic.Bool
	wf := reprise.NewWorkflow("handed-late", func(ctx context.Context, _ int) (string, error) {
		v, err := reprise.Step(ctx, step, 0)
		if err == nil && held.CompareAndSwap(false, true) {
			<-hold // not durable: only to outlast the lease
		}
		return v, err
	})
	env := reprisetest.New(t, nil, wf, step)
	t.Cleanup(release) // before the engine stops, should the test fail
	h, err := wf.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return held.Load() })
	if n := countEvents(env.History(h.ID), store.EventStepCompleted); n != 0 {
		t.Fatalf("%d StepCompleted before the workflow's next advance, want the result handed over unrecorded", n)
	}
	env.Clock.Advance(time.Minute) // the first attempt's lease lapses: Timeout, retried
	waitFor(t, func() bool { return countEvents(env.History(h.ID), store.EventAttemptFailed) == 1 })
	env.Clock.Advance(time.Second) // the retry's backoff; the held workflow keeps the clock from moving
	waitFor(t, func() bool { return countEvents(env.History(h.ID), store.EventStepCompleted) == 1 })
	release()
	run := env.Wait(h.ID)
	if string(run.Output) != `"v2"` {
		t.Errorf("output %s, want the recorded retry's \"v2\"", run.Output)
	}
	for _, ev := range env.History(h.ID) {
		if ev.Type == store.EventStepCompleted && ev.Attempt != 2 {
			t.Errorf("StepCompleted by attempt %d, want 2", ev.Attempt)
		}
	}
}

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
	env := reprisetest.New(t, nil, wf, gate)
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
	env := reprisetest.New(t, nil, wf)
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
