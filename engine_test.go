package reprise_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"reprise"
	"reprise/reprisetest"
	"reprise/retry"
	"reprise/store"
)

func countEvents(events []reprise.Event, typ reprise.EventType) int {
	n := 0
	for _, ev := range events {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

func TestFlakyStepSucceedsAndWorkflowSeesResult(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	var keys sync.Map
	flaky := reprise.NewStep("flaky", func(ctx context.Context, n int) (int, error) {
		info, _ := reprise.StepInfoFrom(ctx)
		keys.Store(info.IdempotencyKey, true)
		if calls.Add(1) < 3 {
			return 0, &typedErr{"NetworkError"}
		}
		return n * 2, nil
	}, reprise.WithPolicyText("[retry: 5, backoff: 1s]"))
	wf := reprise.NewWorkflow("double", func(ctx context.Context, n int) (int, error) {
		return reprise.Step(ctx, flaky, n)
	})
	env := newEnv(t, nil, wf, flaky)
	h, err := wf.Start(t.Context(), env.Engine, 21)
	if err != nil {
		t.Fatal(err)
	}
	env.Wait(h.ID)
	got, err := h.Result(t.Context())
	if err != nil || got != 42 {
		t.Fatalf("result = %v, %v; want 42", got, err)
	}
	n := 0
	keys.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Errorf("step saw %d idempotency keys across attempts, want 1", n)
	}
	h2 := env.History(h.ID)
	if c := countEvents(h2, store.EventAttemptStarted); c != 3 {
		t.Errorf("%d attempts, want 3", c)
	}
	want := []reprise.EventType{store.EventRunStarted, store.EventStepScheduled,
		store.EventAttemptStarted, store.EventAttemptFailed,
		store.EventAttemptStarted, store.EventAttemptFailed,
		store.EventAttemptStarted, store.EventStepCompleted, store.EventRunCompleted}
	if len(h2) != len(want) {
		t.Fatalf("history has %d events, want %d: %+v", len(h2), len(want), h2)
	}
	for i, ev := range h2 {
		if ev.Type != want[i] || ev.Seq != int64(i+1) {
			t.Errorf("event %d = %s seq %d, want %s seq %d", i, ev.Type, ev.Seq, want[i], i+1)
		}
	}
}

func TestStepErrorIsHandledByWorkflow(t *testing.T) {
	t.Parallel()
	charge := reprise.NewStep("charge", func(ctx context.Context, _ string) (string, error) {
		return "", reprise.Permanent(&typedErr{"CardDeclined"})
	})
	refund := reprise.NewStep("compensate", func(ctx context.Context, _ string) (string, error) {
		return "compensated", nil
	})
	wf := reprise.NewWorkflow("order", func(ctx context.Context, _ string) (string, error) {
		_, err := reprise.Step(ctx, charge, "card")
		var se *reprise.StepError
		if !errors.As(err, &se) {
			return "", errors.New("want a StepError")
		}
		if se.Reason != retry.ReasonPermanent || se.Type != "CardDeclined" || se.Attempts != 1 {
			return "", errors.New("wrong StepError: " + se.Error())
		}
		var re *retry.Error
		if !errors.As(err, &re) || re.Type != "CardDeclined" {
			return "", errors.New("StepError does not unwrap to its error type")
		}
		return reprise.Step(ctx, refund, "card")
	})
	env := newEnv(t, nil, wf, charge, refund)
	h, err := wf.Start(t.Context(), env.Engine, "x")
	if err != nil {
		t.Fatal(err)
	}
	env.Wait(h.ID)
	got, err := h.Result(t.Context())
	if err != nil || got != "compensated" {
		t.Fatalf("result = %q, %v", got, err)
	}
}

func TestPanicsAreFailures(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	boom := reprise.NewStep("boom", func(ctx context.Context, _ int) (int, error) {
		if calls.Add(1) == 1 {
			panic("step exploded")
		}
		return 7, nil
	}, reprise.WithPolicy(retry.Attempts(2, retry.None)))
	wf := reprise.NewWorkflow("panicky", func(ctx context.Context, _ int) (int, error) {
		n, err := reprise.Step(ctx, boom, 0)
		if err != nil {
			return 0, err
		}
		panic("workflow exploded after " + string(rune('0'+n)))
	})
	env := newEnv(t, nil, wf, boom)
	h, err := wf.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	run := env.Wait(h.ID)
	if run.Status != reprise.RunFailed || run.Error == nil || run.Error.Type != reprise.TypePanic || !strings.Contains(run.Error.Message, "workflow exploded") {
		t.Fatalf("run = %+v %+v, want failed with a Panic", run, run.Error)
	}
	var stepPanic *reprise.Event
	for _, ev := range env.History(h.ID) {
		if ev.Type == store.EventAttemptFailed {
			stepPanic = &ev
		}
		if ev.Type == store.EventRunFailed && !strings.Contains(ev.Error.Stack, "panicky") && !strings.Contains(ev.Error.Stack, "engine_test.go") {
			t.Errorf("RunFailed keeps no stack: %q", ev.Error.Stack)
		}
	}
	if stepPanic == nil || stepPanic.Error.Type != reprise.TypePanic || !strings.Contains(stepPanic.Error.Message, "step exploded") {
		t.Fatalf("step panic recorded as %+v", stepPanic)
	}
}

func TestIdempotentStart(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	step := reprise.NewStep("count", func(ctx context.Context, _ int) (int, error) { return int(runs.Add(1)), nil })
	wf := reprise.NewWorkflow("once", func(ctx context.Context, _ int) (int, error) { return reprise.Step(ctx, step, 0) })
	env := newEnv(t, nil, wf, step)
	a, created, err := env.Engine.StartRun(t.Context(), "once", nil, reprise.WithRunID("order-1"))
	if err != nil || !created {
		t.Fatal(created, err)
	}
	env.Wait("order-1")
	b, created, err := env.Engine.StartRun(t.Context(), "once", nil, reprise.WithRunID("order-1"))
	if err != nil || created || b.ID != a.ID || b.Status != reprise.RunCompleted {
		t.Fatalf("second start: %+v created=%v err=%v", b, created, err)
	}
	if runs.Load() != 1 {
		t.Errorf("step ran %d times, want 1", runs.Load())
	}
	if _, _, err := env.Engine.StartRun(t.Context(), "once", nil, reprise.WithRunID("bad id")); err == nil {
		t.Error("a run id with a space was accepted")
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
	env := newEnv(t, nil, wf, echo)
	for _, in := range []string{"ok", "fail"} {
		h, err := wf.Start(t.Context(), env.Engine, in)
		if err != nil {
			t.Fatal(err)
		}
		// Wait while the run is resident (its step is held), so that the
		// end state comes from memory.
		waited := make(chan *reprise.Run, 1)
		go func() {
			run, err := env.Engine.WaitRun(t.Context(), h.ID)
			if err != nil {
				t.Error(err)
			}
			waited <- run
		}()
		waitFor(t, func() bool { return env.Engine.Waiters(h.ID) == 1 })
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

func TestCancelDuringBackoff(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	step := reprise.NewStep("slow-retry", func(ctx context.Context, _ int) (int, error) {
		calls.Add(1)
		return 0, errors.New("down")
	}, reprise.WithPolicyText("[retry: 3, backoff: 1h]"))
	wf := reprise.NewWorkflow("cancel-me", func(ctx context.Context, _ int) (int, error) { return reprise.Step(ctx, step, 0) })
	env := newEnv(t, nil, wf, step)
	h, err := wf.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return countEvents(env.History(h.ID), store.EventAttemptFailed) == 1 })
	if err := env.Engine.CancelRun(t.Context(), h.ID, "user asked"); err != nil {
		t.Fatal(err)
	}
	env.Clock.Advance(2 * time.Hour) // past the retry's time
	run := env.Wait(h.ID)
	if run.Status != reprise.RunCancelled {
		t.Fatalf("status %s", run.Status)
	}
	if _, err := h.Result(t.Context()); !errors.Is(err, reprise.ErrCancelled) {
		t.Errorf("Result err = %v, want ErrCancelled", err)
	}
	settle(t, env) // a wrongly kept task, due since the clock passed its time, is claimed and run by now
	if calls.Load() != 1 {
		t.Errorf("step ran %d times after cancel, want 1", calls.Load())
	}
	if err := env.Engine.CancelRun(t.Context(), h.ID, ""); !errors.Is(err, reprise.ErrRunFinished) {
		t.Errorf("second cancel: %v, want ErrRunFinished", err)
	}
}

// failsFirst is a step that fails its first attempt and returns result on
// the next, retried by policy: a gate that keeps a run waiting in backoff.
func failsFirst(name, result, policy string) *reprise.StepDef[int, string] {
	return reprise.NewStep(name, func(ctx context.Context, _ int) (string, error) {
		if info, _ := reprise.StepInfoFrom(ctx); info.Attempt == 1 {
			return "", errors.New("first attempt fails")
		}
		return result, nil
	}, reprise.WithPolicyText(policy))
}

// waitFor polls cond in real time for the engine's goroutines to progress.
// The bound is generous: CI runs every package at once under -race, with
// several engine processes busy beside it.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 30s")
		}
		time.Sleep(time.Millisecond)
	}
}

// settle waits, without moving the clock, until the engine is idle
// (reprisetest's Settle): whatever the engine does at the clock's time is
// done then, and a test checks after it that something did not happen.
func settle(t *testing.T, env *reprisetest.Env) {
	t.Helper()
	env.Settle()
}

// idleness hears from the engine whether it is idle (Observer.EngineBusy
// and EngineIdle): an engine starts idle.
type idleness struct {
	reprise.NopObserver
	busy atomic.Bool
}

func (o *idleness) EngineBusy()    { o.busy.Store(true) }
func (o *idleness) EngineIdle(int) { o.busy.Store(false) }

// idle says whether the engine was idle when it last said so.
func (o *idleness) idle() bool { return !o.busy.Load() }

func TestLateResultAfterTimeoutIsRejected(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var calls atomic.Int32
	// The first attempt ignores its context and answers after its timeout.
	stubborn := reprise.NewStep("stubborn", func(ctx context.Context, _ int) (string, error) {
		if calls.Add(1) == 1 {
			<-release
			return "late", nil
		}
		return "on time", nil
	}, reprise.WithPolicyText("[retry: 1, backoff: 1s] [timeout: 10s]"))
	wf := reprise.NewWorkflow("late", func(ctx context.Context, _ int) (string, error) { return reprise.Step(ctx, stubborn, 0) })
	env := newEnv(t, nil, wf, stubborn)
	h, err := wf.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return calls.Load() == 1 })
	env.Clock.Advance(10 * time.Second) // the attempt's timeout: context cancelled, lease lapses
	waitFor(t, func() bool { return countEvents(env.History(h.ID), store.EventAttemptFailed) == 1 })
	close(release) // the stale result arrives now
	env.Wait(h.ID)
	got, err := h.Result(t.Context())
	if err != nil || got != "on time" {
		t.Fatalf("result %q, %v; the late result must not count", got, err)
	}
	events := env.History(h.ID)
	if c := countEvents(events, store.EventStepCompleted); c != 1 {
		t.Errorf("%d StepCompleted, want 1", c)
	}
	for _, ev := range events {
		if ev.Type == store.EventAttemptFailed && ev.Error.Type != reprise.TypeTimeout {
			t.Errorf("first attempt failed with %+v, want Timeout", ev.Error)
		}
		if ev.Type == store.EventStepCompleted && ev.Attempt != 2 {
			t.Errorf("completed by attempt %d, want 2", ev.Attempt)
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
	obs := &idleness{}
	step := reprise.NewStep("handed", func(ctx context.Context, _ int) (string, error) {
		n := calls.Add(1)
		if n == 1 {
			// The first result is handed over: it waits for the workflow to
			// block on it, when nothing but this step is at work.
			for ctx.Err() == nil && !obs.idle() {
				time.Sleep(time.Millisecond)
			}
		}
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
	// obs hears the engine beside reprisetest's own Observer.
	env := newEnv(t, &reprise.Config{Observer: obs}, wf, step)
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

func TestNondeterminismFailsTheRun(t *testing.T) {
	t.Parallel()
	a := reprise.NewStep("a", func(ctx context.Context, _ int) (int, error) { return 1, nil })
	b := reprise.NewStep("b", func(ctx context.Context, _ int) (int, error) { return 2, nil })
	gate := reprise.NewStep("gate", func(ctx context.Context, _ int) (int, error) {
		return 0, errors.New("not yet")
	}, reprise.WithPolicyText("[retry: 1, backoff: 1h]"))
	v1 := reprise.NewWorkflow("evolving", func(ctx context.Context, _ int) (int, error) {
		if _, err := reprise.Step(ctx, a, 0); err != nil {
			return 0, err
		}
		return reprise.Step(ctx, gate, 0)
	})
	env := newEnv(t, nil, v1, a, b, gate)
	h, err := v1.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return countEvents(env.History(h.ID), store.EventAttemptFailed) == 1 })

	// A new engine with changed code replays the run from its history.
	v2 := reprise.NewWorkflow("evolving", func(ctx context.Context, _ int) (int, error) {
		if _, err := reprise.Step(ctx, b, 0); err != nil {
			return 0, err
		}
		return reprise.Step(ctx, gate, 0)
	})
	env.Restart(nil, v2, a, b, gate)
	run := env.Wait(h.ID)
	if run.Status != reprise.RunFailed || run.Error.Type != reprise.TypeNondeterminism ||
		!strings.Contains(run.Error.Message, "position 1") || !strings.Contains(run.Error.Message, "step a") || !strings.Contains(run.Error.Message, "step b") {
		t.Fatalf("run = %s %+v, want a nondeterminism failure naming position 1, a and b", run.Status, run.Error)
	}
}

// TestManyRetriesAtOnce runs a step that fails 200 times, retried at once,
// before it succeeds, twice: every attempt is in the history, in order, and
// the workflow sees each step's outcome.
func TestManyRetriesAtOnce(t *testing.T) {
	t.Parallel()
	const fails = 200
	var calls atomic.Int32
	flaky := reprise.NewStep("flaky", func(ctx context.Context, n int) (int, error) {
		if calls.Add(1) <= fails {
			return 0, errors.New("not yet")
		}
		return n + 1, nil
	}, reprise.WithPolicyText("[retry: unlimited, backoff_kind: none]"))
	wf := reprise.NewWorkflow("many", func(ctx context.Context, n int) (int, error) {
		n, err := reprise.Step(ctx, flaky, n)
		if err != nil {
			return 0, err
		}
		return reprise.Step(ctx, flaky, n)
	})
	env := newEnv(t, nil, wf, flaky)
	h, err := wf.Start(t.Context(), env.Engine, 1)
	if err != nil {
		t.Fatal(err)
	}
	env.Wait(h.ID)
	if got, err := h.Result(t.Context()); err != nil || got != 3 {
		t.Fatalf("result = %v, %v; want 3", got, err)
	}
	events := env.History(h.ID)
	if c := countEvents(events, store.EventAttemptFailed); c != fails {
		t.Errorf("%d failed attempts, want %d", c, fails)
	}
	if c := countEvents(events, store.EventStepCompleted); c != 2 {
		t.Errorf("%d steps completed, want 2", c)
	}
	for i, ev := range events {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
	}
}

// TestReadyOnceRunning: Ready is closed once Run has started, and not
// before.
func TestReadyOnceRunning(t *testing.T) {
	t.Parallel()
	e, err := reprise.New(reprise.Config{Store: tempStore(t)})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.Ready():
		t.Fatal("Ready before Run")
	default:
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	<-e.Ready()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
