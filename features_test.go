package reprise_test

import (
	"context"
	"errors"
	"fmt"
	"math"
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

func eventsOf(events []reprise.Event, typ reprise.EventType) []reprise.Event {
	var out []reprise.Event
	for _, ev := range events {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

func TestSelectCancelsTheLoser(t *testing.T) {
	t.Parallel()
	var cause atomic.Value
	release := make(chan struct{})
	slow := reprise.NewStep("slow", func(ctx context.Context, _ int) (string, error) {
		<-ctx.Done()
		cause.Store(context.Cause(ctx))
		<-release // answers late, after it lost
		return "late", nil
	})
	wf := reprise.NewWorkflow("race-timer", func(ctx context.Context, _ int) (string, error) {
		f := reprise.Go(ctx, slow, 0)
		if reprise.Select(ctx, f, reprise.After(ctx, 5*time.Second)) == 0 {
			return "step won", nil
		}
		if _, err := f.Get(ctx); !errors.Is(err, reprise.ErrStepCancelled) {
			return "", fmt.Errorf("loser's Get = %v, want ErrStepCancelled", err)
		}
		return "timer won", nil
	})
	ends := attemptEnds{ended: make(chan reprise.AttemptInfo, 8)}
	env := newEnv(t, &reprise.Config{Observer: ends}, wf, slow)
	h, err := wf.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	env.Wait(h.ID)
	close(release)
	got, err := h.Result(t.Context())
	if err != nil || got != "timer won" {
		t.Fatalf("result %q, %v", got, err)
	}
	waitFor(t, func() bool { return cause.Load() != nil })
	if c := cause.Load().(error); !errors.Is(c, reprise.ErrStepCancelled) {
		t.Errorf("losing attempt cancelled with %v", c)
	}
	events := env.History(h.ID)
	if n := len(eventsOf(events, store.EventStepCancelRequested)); n != 1 {
		t.Errorf("%d StepCancelRequested, want 1", n)
	}
	// The engine reports an attempt's end after it recorded what it would;
	// the losing attempt is the run's only one.
	ends.next(t)
	if n := len(eventsOf(env.History(h.ID), store.EventStepCompleted)); n != 0 {
		t.Errorf("the late result was recorded")
	}
}

// attemptEnds hears attempts end: their outcomes recorded, refused as
// stale, or abandoned with nothing to record.
type attemptEnds struct {
	reprise.NopObserver
	ended chan reprise.AttemptInfo
}

func (o attemptEnds) AttemptEnded(a reprise.AttemptEnd)        { o.ended <- a.AttemptInfo }
func (o attemptEnds) StaleResultRefused(a reprise.AttemptInfo) { o.ended <- a }

// next waits for an attempt to end.
func (o attemptEnds) next(t *testing.T) reprise.AttemptInfo {
	t.Helper()
	select {
	case a := <-o.ended:
		return a
	case <-time.After(30 * time.Second):
		t.Fatal("no attempt ended within 30s")
		return reprise.AttemptInfo{}
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
	env := newEnv(t, nil, wf, slow, gate)
	h, err := wf.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
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

// countdown continues as new until its input reaches zero; each execution
// races a step against a timer, so stale results and timers of earlier
// executions exist (stale events across executions).
func TestContinueAsNewDropsStaleEvents(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var lateDone atomic.Int32
	// On execution 1 the step hangs past the timer and answers after the
	// switch; on later ones it wins while the timer is still pending.
	racer := reprise.NewStep("racer", func(ctx context.Context, n int) (int, error) {
		if n == 3 {
			<-release
			lateDone.Add(1)
		}
		return n, nil
	})
	wf := reprise.NewWorkflow("countdown", func(ctx context.Context, n int) (string, error) {
		f := reprise.Go(ctx, racer, n)
		won := "step"
		if reprise.Select(ctx, f, reprise.After(ctx, time.Minute)) == 1 {
			won = "timer"
		}
		if n == 0 {
			return fmt.Sprintf("done at execution with %s winning", won), nil
		}
		return "", reprise.ContinueAsNew(ctx, n-1)
	})
	env := newEnv(t, nil, wf, racer)
	h, err := wf.Start(t.Context(), env.Engine, 3)
	if err != nil {
		t.Fatal(err)
	}
	env.AdvanceUntil(func() bool {
		run, err := env.Engine.GetRun(t.Context(), h.ID)
		if err != nil {
			t.Fatal(err)
		}
		return run.Execution >= 2
	})
	close(release) // execution 1's step answers now: too late
	waitFor(t, func() bool { return lateDone.Load() == 1 })
	// A restart in the middle replays the current execution from its own
	// history, ignoring the earlier executions' events.
	env.Restart(nil, wf, racer)
	run := env.Wait(h.ID)
	if run.Status != reprise.RunCompleted || run.Execution != 4 {
		t.Fatalf("run %s at execution %d, want completed at 4", run.Status, run.Execution)
	}
	events := env.History(h.ID)
	if n := len(eventsOf(events, store.EventRunContinuedAsNew)); n != 3 {
		t.Errorf("%d RunContinuedAsNew, want 3", n)
	}
	for _, ev := range eventsOf(events, store.EventStepCompleted) {
		if ev.Execution == 1 {
			t.Errorf("execution 1's late result was recorded: %+v", ev)
		}
	}
	for _, ev := range eventsOf(events, store.EventTimerFired) {
		if ev.Execution != 1 {
			t.Errorf("a timer of execution %d fired after its execution ended", ev.Execution)
		}
	}
	if got, err := h.Result(t.Context()); err != nil || got != "done at execution with step winning" {
		t.Fatalf("result %q, %v", got, err)
	}
}

func TestSignals(t *testing.T) {
	t.Parallel()
	wf := reprise.NewWorkflow("approval", func(ctx context.Context, _ int) (string, error) {
		var got []string
		for range 2 {
			s, err := reprise.WaitSignal[string](ctx, "approve").Get(ctx)
			if err != nil {
				return "", err
			}
			got = append(got, s)
		}
		sig := reprise.WaitSignal[string](ctx, "approve")
		if reprise.Select(ctx, sig, reprise.After(ctx, time.Hour)) == 1 {
			got = append(got, "timed out")
		}
		return strings.Join(got, ","), nil
	})
	env := newEnv(t, nil, wf)
	h, err := wf.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Both are sent before the workflow waits: they are kept, in order.
	if err := env.Engine.SignalRun(t.Context(), h.ID, "approve", "alice"); err != nil {
		t.Fatal(err)
	}
	if err := env.Engine.SignalRun(t.Context(), h.ID, "approve", "bob"); err != nil {
		t.Fatal(err)
	}
	env.Wait(h.ID)
	if got, err := h.Result(t.Context()); err != nil || got != "alice,bob,timed out" {
		t.Fatalf("result %q, %v", got, err)
	}
	if err := env.Engine.SignalRun(t.Context(), h.ID, "approve", "late"); !errors.Is(err, reprise.ErrRunFinished) {
		t.Errorf("signal to a finished run: %v, want ErrRunFinished", err)
	}
}

func TestChildRuns(t *testing.T) {
	t.Parallel()
	var tries atomic.Int32
	flaky := reprise.NewStep("child-step", func(ctx context.Context, n int) (int, error) {
		return n + 1, nil
	})
	child := reprise.NewWorkflow("child", func(ctx context.Context, n int) (int, error) {
		if tries.Add(1) < 3 {
			return 0, errors.New("child failed")
		}
		return reprise.Step(ctx, flaky, n)
	})
	parent := reprise.NewWorkflow("parent", func(ctx context.Context, n int) (int, error) {
		return reprise.ChildRun(ctx, child, n, retry.Attempts(5, retry.Fixed(time.Minute)))
	})
	env := newEnv(t, nil, parent, child, flaky)
	h, err := parent.Start(t.Context(), env.Engine, 41)
	if err != nil {
		t.Fatal(err)
	}
	env.Wait(h.ID)
	if got, err := h.Result(t.Context()); err != nil || got != 42 {
		t.Fatalf("result %d, %v", got, err)
	}
	events := env.History(h.ID)
	if n := len(eventsOf(events, store.EventChildStarted)); n != 3 {
		t.Errorf("%d child runs started, want 3 (two failed, one completed)", n)
	}
	if n := len(eventsOf(events, store.EventChildFailed)); n != 2 {
		t.Errorf("%d ChildFailed, want 2", n)
	}
}

// TestSleepForever: a sleep as long as a Duration goes (past the year 2262,
// where nanoseconds since 1970 end) waits; it does not fire at once.
func TestSleepForever(t *testing.T) {
	t.Parallel()
	wf := reprise.NewWorkflow("sleeps-forever", func(ctx context.Context, _ int) (int, error) {
		return 0, reprise.Sleep(ctx, math.MaxInt64)
	})
	env := newEnv(t, nil, wf)
	h, err := wf.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	env.Settle()
	env.Clock.Advance(24 * time.Hour)
	env.Settle()
	if run, err := env.Engine.GetRun(t.Context(), h.ID); err != nil || run.Status != reprise.RunRunning {
		t.Fatalf("run: %+v, %v; want it running, asleep", run, err)
	}
}

func TestCancellingParentCancelsChildren(t *testing.T) {
	t.Parallel()
	wait := reprise.NewWorkflow("waits-forever", func(ctx context.Context, _ int) (int, error) {
		return 0, reprise.Sleep(ctx, 24*time.Hour)
	})
	parent := reprise.NewWorkflow("parent-of-sleeper", func(ctx context.Context, _ int) (int, error) {
		return reprise.Child(ctx, wait, 0).Get(ctx)
	})
	env := newEnv(t, nil, parent, wait)
	h, err := parent.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	childID := h.ID + "/1"
	waitFor(t, func() bool {
		run, err := env.Engine.GetRun(t.Context(), childID)
		return err == nil && run.Status == reprise.RunRunning
	})
	if err := env.Engine.CancelRun(t.Context(), h.ID, "stop"); err != nil {
		t.Fatal(err)
	}
	if run := env.Wait(childID); run.Status != reprise.RunCancelled {
		t.Errorf("child is %s after its parent was cancelled", run.Status)
	}
}

// TestParentEndStopsItsChildren: a parent that ends without waiting for
// its children cancels them; their attempts in step code here are
// cancelled at once, and the observer hears that each ended, cancelled,
// grandchildren too.
func TestParentEndStopsItsChildren(t *testing.T) {
	t.Parallel()
	var running, stopped sync.WaitGroup
	running.Add(2)
	stopped.Add(2)
	hang := reprise.NewStep("hang-until-cancelled", func(ctx context.Context, n int) (int, error) {
		running.Done()
		<-ctx.Done()
		stopped.Done()
		return 0, ctx.Err()
	})
	var child *reprise.WorkflowDef[int, int]
	child = reprise.NewWorkflow("hanging-child", func(ctx context.Context, n int) (int, error) {
		if n > 0 {
			reprise.Child(ctx, child, n-1)
		}
		return reprise.Step(ctx, hang, n)
	})
	parent := reprise.NewWorkflow("leaves-its-child", func(ctx context.Context, n int) (int, error) {
		reprise.Child(ctx, child, n)
		return reprise.WaitSignal[int](ctx, "end").Get(ctx)
	})
	obs := &runEnds{}
	env := newEnv(t, &reprise.Config{Observer: obs}, parent, child, hang)
	h, err := parent.Start(t.Context(), env.Engine, 1)
	if err != nil {
		t.Fatal(err)
	}
	running.Wait()
	if err := env.Engine.SignalRun(t.Context(), h.ID, "end", 0); err != nil {
		t.Fatal(err)
	}
	env.Wait(h.ID)
	stopped.Wait()
	for _, id := range []string{h.ID + "/1", h.ID + "/1/1"} {
		if run := env.Wait(id); run.Status != reprise.RunCancelled {
			t.Errorf("%s is %s, want cancelled", id, run.Status)
		}
		if s, ok := obs.status(id); s != reprise.RunCancelled {
			t.Errorf("observer heard of %s: %q (heard: %v), want cancelled", id, s, ok)
		}
	}
}

// TestWaitAnyCancelsNothing: WaitAny returns the call that settled first
// and leaves the other in flight, to complete and be recorded; a replay
// (after a restart) picks the same winner from the history, where both
// have settled by then, the loser listed first.
func TestWaitAnyCancelsNothing(t *testing.T) {
	t.Parallel()
	slow := failsFirst("slow", "slow", "[retry: 2, backoff: 1h]")
	fast := reprise.NewStep("fast", func(context.Context, int) (string, error) { return "fast", nil })
	gate := failsFirst("gate", "open", "[retry: 2, backoff: 1h]")
	wf := reprise.NewWorkflow("first-come", func(ctx context.Context, _ int) (string, error) {
		if i := reprise.WaitAny(ctx); i != -1 {
			return "", fmt.Errorf("WaitAny of nothing = %d, want -1", i)
		}
		s, f := reprise.Go(ctx, slow, 0), reprise.Go(ctx, fast, 0)
		// A replay that picked the other winner would call another step
		// at the next position: a NondeterminismError.
		got, then := []string{"fast won"}, fast
		if reprise.WaitAny(ctx, s, f) == 0 {
			got, then = []string{"slow won"}, slow
		}
		if _, err := reprise.Step(ctx, then, 1); err != nil {
			return "", err
		}
		for _, fut := range []*reprise.Future[string]{s, f} {
			out, err := fut.Get(ctx)
			if err != nil {
				return "", err
			}
			got = append(got, out)
		}
		if _, err := reprise.Step(ctx, gate, 0); err != nil {
			return "", err
		}
		return strings.Join(got, ", "), nil
	})
	env := newEnv(t, nil, wf, slow, fast, gate)
	h, err := wf.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Restart while the gate waits for its retry: slow's and the gate's
	// first attempts have failed, slow has completed.
	env.AdvanceUntil(func() bool {
		events := env.History(h.ID)
		return countEvents(events, store.EventAttemptFailed) == 2 || countEvents(events, store.EventRunFailed) > 0
	})
	env.Restart(nil, wf, slow, fast, gate)
	if run := env.Wait(h.ID); run.Status != reprise.RunCompleted {
		t.Fatalf("run %s: %+v", run.Status, run.Error)
	}
	if out, err := h.Result(t.Context()); err != nil || out != "fast won, slow, fast" {
		t.Fatalf("result %q, %v; want fast won, slow, fast", out, err)
	}
	events := env.History(h.ID)
	if n := countEvents(events, store.EventStepCancelRequested); n != 0 {
		t.Errorf("%d StepCancelRequested, want none", n)
	}
	var completed []string
	for _, ev := range eventsOf(events, store.EventStepCompleted) {
		completed = append(completed, fmt.Sprintf("%s@%d", ev.Step, ev.Position))
	}
	if got, want := strings.Join(completed, " "), "fast@2 fast@3 slow@1 gate@4"; got != want {
		t.Errorf("steps completed %s, want %s", got, want)
	}
}

func TestVersioningKeepsOldRunsOnTheOldBranch(t *testing.T) {
	t.Parallel()
	a := reprise.NewStep("a", func(ctx context.Context, _ int) (string, error) { return "a", nil })
	gate := failsFirst("gate", "open", "[retry: 1, backoff: 1h]")
	b := reprise.NewStep("b", func(ctx context.Context, _ int) (string, error) { return "b", nil })
	v1 := reprise.NewWorkflow("versioned", func(ctx context.Context, _ int) (string, error) {
		if _, err := reprise.Step(ctx, gate, 0); err != nil {
			return "", err
		}
		return reprise.Step(ctx, a, 0)
	})
	v2 := reprise.NewWorkflow("versioned", func(ctx context.Context, _ int) (string, error) {
		if reprise.Version(ctx, "use-b", reprise.DefaultVersion, 1) == 1 {
			if _, err := reprise.Step(ctx, gate, 0); err != nil {
				return "", err
			}
			return reprise.Step(ctx, b, 0)
		}
		if _, err := reprise.Step(ctx, gate, 0); err != nil {
			return "", err
		}
		return reprise.Step(ctx, a, 0)
	})
	env := newEnv(t, nil, v1, a, b, gate)
	old, err := v1.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return countEvents(env.History(old.ID), store.EventAttemptFailed) == 1 })
	env.Restart(nil, v2, a, b, gate)
	fresh, err := v2.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	env.Wait(old.ID)
	env.Wait(fresh.ID)
	if got, err := old.Result(t.Context()); err != nil || got != "a" {
		t.Errorf("old run: %q, %v; want the old branch", got, err)
	}
	if got, err := fresh.Result(t.Context()); err != nil || got != "b" {
		t.Errorf("new run: %q, %v; want the new branch", got, err)
	}
	if n := len(eventsOf(env.History(fresh.ID), store.EventVersionMarker)); n != 1 {
		t.Errorf("new run has %d version markers, want 1", n)
	}
}

// TestVersionMarkersReachTheHistoryAtTheEnd: a version marker that the
// code records after its last write to the store (just before it returns,
// continues as new, or waits for a call that has settled already) goes
// with the run's end, whether the run ends in its first write (created
// with its end) or in a later one.
func TestVersionMarkersReachTheHistoryAtTheEnd(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds() {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			testVersionMarkersAtTheEnd(t, kind.open(t, nil))
		})
	}
}

func testVersionMarkersAtTheEnd(t *testing.T, st store.Store) {
	one := reprise.NewStep("one", func(context.Context, int) (int, error) { return 1, nil })
	// at-once ends in its first write, as the run is created.
	atOnce := reprise.NewWorkflow("at-once", func(ctx context.Context, _ int) (int, error) {
		return reprise.Version(ctx, "at-once", reprise.DefaultVersion, 1), nil
	})
	// settled waits once more for a step it has the result of.
	settled := reprise.NewWorkflow("settled", func(ctx context.Context, _ int) (int, error) {
		f := reprise.Go(ctx, one, 0)
		if _, err := f.Get(ctx); err != nil {
			return 0, err
		}
		v := reprise.Version(ctx, "settled", reprise.DefaultVersion, 2)
		n, err := f.Get(ctx)
		return n + v, err
	})
	// chain continues as new in its first write, then after a step, and
	// completes after a step, with a marker before each end.
	chain := reprise.NewWorkflow("chain", func(ctx context.Context, n int) (int, error) {
		if n > 0 {
			if _, err := reprise.Step(ctx, one, n); err != nil {
				return 0, err
			}
		}
		v := reprise.Version(ctx, fmt.Sprint("chain-", n), reprise.DefaultVersion, n+1)
		if n < 2 {
			return 0, reprise.ContinueAsNew(ctx, n+1)
		}
		return v, nil
	})
	e := reprisetest.Run(t, reprise.Config{Store: st}, one, atOnce, settled, chain)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	for _, c := range []struct {
		start func() (string, error)
		// want is the history, each event as execution:type, or
		// execution:type@position=version for a marker.
		want string
	}{{
		start: func() (string, error) { h, err := atOnce.Start(ctx, e, 0); return runID(h, err) },
		want:  "1:RunStarted 1:VersionMarker@1=1 1:RunCompleted",
	}, {
		start: func() (string, error) { h, err := settled.Start(ctx, e, 0); return runID(h, err) },
		want: "1:RunStarted 1:StepScheduled 1:AttemptStarted 1:StepCompleted 1:VersionMarker@2=2 " +
			"1:RunCompleted",
	}, {
		start: func() (string, error) { h, err := chain.Start(ctx, e, 0); return runID(h, err) },
		want: "1:RunStarted 1:VersionMarker@1=1 1:RunContinuedAsNew " +
			"2:RunStarted 2:StepScheduled 2:AttemptStarted 2:StepCompleted 2:VersionMarker@2=2 2:RunContinuedAsNew " +
			"3:RunStarted 3:StepScheduled 3:AttemptStarted 3:StepCompleted 3:VersionMarker@2=3 3:RunCompleted",
	}} {
		id, err := c.start()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.WaitRun(ctx, id); err != nil {
			t.Fatal(err)
		}
		events, err := e.History(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ev := range events {
			s := fmt.Sprintf("%d:%s", ev.Execution, ev.Type)
			if ev.Type == store.EventVersionMarker {
				s += fmt.Sprintf("@%d=%d", ev.Position, ev.Version)
			}
			got = append(got, s)
		}
		if g := strings.Join(got, " "); g != c.want {
			t.Errorf("history of %s:\n got %s\nwant %s", id, g, c.want)
		}
	}
}

// runID is the id of a run started with handle h, or err.
func runID[O any](h *reprise.Handle[O], err error) (string, error) {
	if err != nil {
		return "", err
	}
	return h.ID, nil
}

func TestRedriveGivesAFreshBudget(t *testing.T) {
	t.Parallel()
	var fixed atomic.Bool
	fragile := reprise.NewStep("fragile", func(ctx context.Context, _ int) (string, error) {
		if !fixed.Load() {
			return "", errors.New("bug")
		}
		return "fixed", nil
	}, reprise.WithPolicyText("[retry: 2, backoff: 1s]"))
	wf := reprise.NewWorkflow("redrivable", func(ctx context.Context, _ int) (string, error) {
		return reprise.Step(ctx, fragile, 0)
	})
	env := newEnv(t, nil, wf, fragile)
	h, err := wf.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	if run := env.Wait(h.ID); run.Status != reprise.RunFailed {
		t.Fatalf("run %s, want failed", run.Status)
	}
	fixed.Store(true)
	if err := env.Engine.RedriveRun(t.Context(), h.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	env.Wait(h.ID)
	if got, err := h.Result(t.Context()); err != nil || got != "fixed" {
		t.Fatalf("after redrive: %q, %v", got, err)
	}
	events := env.History(h.ID)
	red := eventsOf(events, store.EventRunRedriven)
	if len(red) != 1 || red[0].By != "alice" {
		t.Errorf("RunRedriven = %+v", red)
	}
	if n := len(eventsOf(events, store.EventAttemptStarted)); n != 4 {
		t.Errorf("%d attempts, want 3 before the redrive and 1 after", n)
	}
	if err := env.Engine.RedriveRun(t.Context(), h.ID, "bob"); !errors.Is(err, reprise.ErrNotRedrivable) {
		t.Errorf("redrive of a completed run: %v", err)
	}
}

func TestPoisonTask(t *testing.T) {
	t.Parallel()
	wf := reprise.NewWorkflow("poisoned", func(ctx context.Context, _ int) (string, error) {
		return reprise.Call[string](ctx, "remote-job", 0)
	})
	env := newEnv(t, &reprise.Config{LeaseTTL: time.Minute, PoisonAfter: 3}, wf)
	unlimited := retry.Attempts(retry.Unlimited, retry.None)
	if err := env.Engine.RegisterRemoteStep("remote-job", &unlimited); err != nil {
		t.Fatal(err)
	}
	h, err := wf.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		var tasks []*store.Task
		waitFor(t, func() bool {
			var err error
			if tasks, err = env.Engine.ClaimTasks(t.Context(), "doomed-worker", []string{"remote-job"}, 1); err != nil {
				t.Fatal(err)
			}
			return len(tasks) == 1
		})
		// The worker dies: its lease lapses with no result.
		env.Clock.Advance(time.Minute)
		waitFor(t, func() bool { return countEvents(env.History(h.ID), store.EventAttemptFailed) == i+1 })
	}
	run := env.Wait(h.ID)
	if run.Status != reprise.RunFailed {
		t.Fatalf("run %s", run.Status)
	}
	failed := eventsOf(env.History(h.ID), store.EventStepFailed)
	if len(failed) != 1 || failed[0].Error.Type != reprise.TypePoison || failed[0].Attempt != 3 {
		t.Fatalf("StepFailed = %+v, want Poison after 3 attempts", failed)
	}
}

// TestLosingTimerIsNotConsumedLater: the losing timer of a select must not
// satisfy a later wait.
func TestLosingTimerIsNotConsumedLater(t *testing.T) {
	t.Parallel()
	quick := reprise.NewStep("quick", func(ctx context.Context, _ int) (int, error) { return 1, nil })
	wf := reprise.NewWorkflow("stale-timer", func(ctx context.Context, _ int) (string, error) {
		if reprise.Select(ctx, reprise.Go(ctx, quick, 0), reprise.After(ctx, time.Minute)) != 0 {
			return "", errors.New("the timer beat an instant step")
		}
		start := reprise.Now(ctx)
		if err := reprise.Sleep(ctx, 2*time.Minute); err != nil {
			return "", err
		}
		return reprise.Now(ctx).Sub(start).String(), nil
	})
	env := newEnv(t, nil, wf, quick)
	h, err := wf.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	env.Wait(h.ID)
	if got, err := h.Result(t.Context()); err != nil || got != "2m0s" {
		t.Fatalf("the sleep after the select took %q (%v), want 2m0s", got, err)
	}
	fired := eventsOf(env.History(h.ID), store.EventTimerFired)
	if len(fired) != 1 || fired[0].Position != 3 {
		t.Errorf("timers fired: %+v, want only the sleep's (position 3)", fired)
	}
}

func TestSignalsSurviveARestart(t *testing.T) {
	t.Parallel()
	wf := reprise.NewWorkflow("two-signals", func(ctx context.Context, _ int) (string, error) {
		a, err := reprise.WaitSignal[string](ctx, "next").Get(ctx)
		if err != nil {
			return "", err
		}
		b, err := reprise.WaitSignal[string](ctx, "next").Get(ctx)
		if err != nil {
			return "", err
		}
		return a + "," + b, nil
	})
	env := newEnv(t, nil, wf)
	h, err := wf.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Engine.SignalRun(t.Context(), h.ID, "next", "one"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return countEvents(env.History(h.ID), store.EventSignalReceived) == 1 })
	env.Restart(nil, wf)
	if err := env.Engine.SignalRun(t.Context(), h.ID, "next", "two"); err != nil {
		t.Fatal(err)
	}
	env.Wait(h.ID)
	if got, err := h.Result(t.Context()); err != nil || got != "one,two" {
		t.Fatalf("result %q, %v", got, err)
	}
}

func TestChildSurvivesParentsEngineRestart(t *testing.T) {
	t.Parallel()
	gate := failsFirst("child-gate", "child done", "[retry: 1, backoff: 1h]")
	child := reprise.NewWorkflow("slow-child", func(ctx context.Context, _ int) (string, error) {
		return reprise.Step(ctx, gate, 0)
	})
	parent := reprise.NewWorkflow("patient-parent", func(ctx context.Context, _ int) (string, error) {
		return reprise.Child(ctx, child, 0).Get(ctx)
	})
	env := newEnv(t, nil, parent, child, gate)
	h, err := parent.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		events, err := env.Engine.History(t.Context(), h.ID+"/1")
		return err == nil && countEvents(events, store.EventAttemptFailed) == 1
	})
	env.Restart(nil, parent, child, gate)
	env.Wait(h.ID)
	if got, err := h.Result(t.Context()); err != nil || got != "child done" {
		t.Fatalf("result %q, %v", got, err)
	}
}

func TestSelectCancelsALosingChild(t *testing.T) {
	t.Parallel()
	slowChild := reprise.NewWorkflow("slow-child-run", func(ctx context.Context, _ int) (int, error) {
		return 0, reprise.Sleep(ctx, time.Hour)
	})
	parent := reprise.NewWorkflow("impatient-parent", func(ctx context.Context, _ int) (string, error) {
		if reprise.Select(ctx, reprise.Child(ctx, slowChild, 0), reprise.After(ctx, time.Minute)) != 1 {
			return "child", nil
		}
		// The parent goes on for a day: only the select cancels the child.
		return "timer", reprise.Sleep(ctx, 24*time.Hour)
	})
	env := newEnv(t, nil, parent, slowChild)
	h, err := parent.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	env.AdvanceUntil(func() bool {
		run, err := env.Engine.GetRun(t.Context(), h.ID+"/1")
		return err == nil && run.Status == reprise.RunCancelled
	})
	if run, err := env.Engine.GetRun(t.Context(), h.ID); err != nil {
		t.Fatal(err)
	} else if run.Status != reprise.RunRunning {
		t.Errorf("parent is %s; the child must have been cancelled by the select, not by the parent's end", run.Status)
	}
}
