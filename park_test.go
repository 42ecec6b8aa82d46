package reprise_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"reprise"
	"reprise/clock"
	"reprise/memory"
	"reprise/reprisetest"
	"reprise/retry"
	"reprise/store"
)

// TestEvictedRunsResume: a run evicted from memory in each kind of wait
// resumes when its wait ends, and its history is the one the same run
// writes on an engine that never evicts.
func TestEvictedRunsResume(t *testing.T) {
	t.Parallel()
	flaky := failsFirst("park-flaky", "ok", "[retry: 2, backoff: 1h]")
	echo := reprise.NewStep("park-echo", func(_ context.Context, s string) (string, error) { return s, nil })
	child := reprise.NewWorkflow("park-child", func(ctx context.Context, _ int) (string, error) {
		if err := reprise.Sleep(ctx, time.Hour); err != nil {
			return "", err
		}
		return reprise.Step(ctx, echo, "child")
	})
	// Each case's workflow waits once in its kind of wait, then runs a
	// step, so that the revived run does more than finish.
	cases := []struct {
		name string
		wait func(ctx context.Context) (string, error)
		// act ends the wait from outside, once the run is parked; nil if
		// the clock does.
		act func(t *testing.T, env *reprisetest.Env, id string)
	}{{
		name: "backoff",
		wait: func(ctx context.Context) (string, error) { return reprise.Step(ctx, flaky, 0) },
	}, {
		name: "timer",
		wait: func(ctx context.Context) (string, error) {
			return "slept", reprise.Sleep(ctx, 2*time.Hour)
		},
	}, {
		name: "signal",
		wait: func(ctx context.Context) (string, error) { return reprise.WaitSignal[string](ctx, "go").Get(ctx) },
		act: func(t *testing.T, env *reprisetest.Env, id string) {
			if err := env.Engine.SignalRun(t.Context(), id, "go", "signalled"); err != nil {
				t.Fatal(err)
			}
		},
	}, {
		name: "child",
		wait: func(ctx context.Context) (string, error) {
			return reprise.ChildRun(ctx, child, 0, retry.Attempts(1, retry.Fixed(time.Minute)))
		},
	}, {
		name: "remote step",
		wait: func(ctx context.Context) (string, error) {
			return reprise.Call[string](ctx, "park-pulled", "in")
		},
		act: func(t *testing.T, env *reprisetest.Env, id string) {
			tasks, err := env.Engine.ClaimTasks(t.Context(), "puller", []string{"park-pulled"}, 1)
			if err != nil || len(tasks) != 1 {
				t.Fatalf("claim the pulled step: %v, %d tasks", err, len(tasks))
			}
			env.Clock.Advance(time.Minute)
			if err := env.Engine.CompleteTask(t.Context(), tasks[0].ID, tasks[0].Token, []byte(`"pulled"`)); err != nil {
				t.Fatal(err)
			}
		},
	}}
	for _, kind := range storeKinds() {
		for _, tc := range cases {
			t.Run(kind.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				wf := reprise.NewWorkflow("park-subject", func(ctx context.Context, _ int) (string, error) {
					got, err := tc.wait(ctx)
					if err != nil {
						return "", err
					}
					return reprise.Step(ctx, echo, got+" then echoed")
				})
				// idler holds a second resident run, which puts the
				// engine with room for one over its cap.
				idler := reprise.NewWorkflow("park-idler", func(ctx context.Context, _ int) (string, error) {
					return reprise.WaitSignal[string](ctx, "end").Get(ctx)
				})
				run := func(capped bool) []string {
					c := clock.NewFake(reprisetest.Start)
					cfg := &reprise.Config{MaxResidentRuns: -1}
					if capped {
						cfg.MaxResidentRuns = 1
					}
					env := reprisetest.NewOn(t, kind.open(t, c.Now), c, cfg, wf, idler, child, flaky, echo)
					if err := env.Engine.RegisterRemoteStep("park-pulled", nil); err != nil {
						t.Fatal(err)
					}
					if _, _, err := env.Engine.StartRun(t.Context(), "park-subject", nil, reprise.WithRunID("subject")); err != nil {
						t.Fatal(err)
					}
					if _, _, err := env.Engine.StartRun(t.Context(), "park-idler", nil, reprise.WithRunID("idler")); err != nil {
						t.Fatal(err)
					}
					if capped {
						env.AdvanceUntil(func() bool { return env.Engine.Parked("subject") })
					} else {
						env.Settle()
					}
					if tc.act != nil {
						tc.act(t, env, "subject")
					}
					if run := env.Wait("subject"); run.Status != reprise.RunCompleted {
						t.Fatalf("capped %v: run %s: %+v", capped, run.Status, run.Error)
					}
					if env.Engine.Parked("subject") {
						t.Error("a finished run is still parked")
					}
					return historyLines(env.History("subject"))
				}
				want := run(false)
				got := run(true)
				if g, w := strings.Join(got, "\n"), strings.Join(want, "\n"); g != w {
					t.Errorf("history of the evicted run:\n%s\nwant (never evicted):\n%s", g, w)
				}
			})
		}
	}
}

// historyLines is a history as lines a test compares, without what
// differs between two engines (their ids, tokens).
func historyLines(events []reprise.Event) []string {
	lines := make([]string, len(events))
	start := events[0].At
	for i, ev := range events {
		lines[i] = fmt.Sprintf("%d %s +%v pos %d %s attempt %d out %s signal %s child %s",
			ev.Seq, ev.Type, ev.At.Sub(start), ev.Position, ev.Step, ev.Attempt, ev.Output, ev.Signal, ev.Child)
	}
	return lines
}

// TestCancelParkedRuns: cancelling a parked run, whose parked child the
// store cancels with it, forgets both: nothing of them stays parked.
func TestCancelParkedRuns(t *testing.T) {
	t.Parallel()
	child := reprise.NewWorkflow("parked-child", func(ctx context.Context, _ int) (string, error) {
		return reprise.WaitSignal[string](ctx, "never").Get(ctx)
	})
	parent := reprise.NewWorkflow("parked-parent", func(ctx context.Context, _ int) (string, error) {
		return reprise.Child(ctx, child, 0).Get(ctx)
	})
	env := newEnv(t, &reprise.Config{MaxResidentRuns: 1}, parent, child)
	if _, _, err := env.Engine.StartRun(t.Context(), parent.Name(), nil, reprise.WithRunID("p")); err != nil {
		t.Fatal(err)
	}
	env.AdvanceUntil(func() bool { return env.Engine.Parked("p") && env.Engine.Parked("p/1") })
	if err := env.Engine.CancelRun(t.Context(), "p", "test"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"p", "p/1"} {
		if env.Engine.Parked(id) {
			t.Errorf("run %s is still parked after its cancel", id)
		}
		if run := env.Wait(id); run.Status != reprise.RunCancelled {
			t.Errorf("run %s: %s, want cancelled", id, run.Status)
		}
	}
}

// TestParkedRunHearsOfAnotherProcess: a parked run whose step another
// process completed, writing to the store directly, is revived by the
// notice of that outcome, and not by a notice of what it had seen.
func TestParkedRunHearsOfAnotherProcess(t *testing.T) {
	t.Parallel()
	wf := reprise.NewWorkflow("parked-remote", func(ctx context.Context, _ int) (string, error) {
		return reprise.Call[string](ctx, "elsewhere", 0)
	})
	idler := reprise.NewWorkflow("parked-idler", func(ctx context.Context, _ int) (string, error) {
		return reprise.WaitSignal[string](ctx, "end").Get(ctx)
	})
	env := reprisetest.NewMemory(t, &reprise.Config{MaxResidentRuns: 1}, wf, idler)
	if err := env.Engine.RegisterRemoteStep("elsewhere", nil); err != nil {
		t.Fatal(err)
	}
	for _, start := range []struct{ wf, id string }{{wf.Name(), "r"}, {idler.Name(), "idler"}} {
		if _, _, err := env.Engine.StartRun(t.Context(), start.wf, nil, reprise.WithRunID(start.id)); err != nil {
			t.Fatal(err)
		}
	}
	env.AdvanceUntil(func() bool { return env.Engine.Parked("r") })
	seen := env.History("r")
	// A notice of what the run had seen revives nothing.
	env.Engine.Notify(store.Notice{Kind: store.NoticeOutcome, RunID: "r", Owner: env.Engine.WorkerID(), Seq: seen[len(seen)-1].Seq})
	env.Settle()
	if !env.Engine.Parked("r") {
		t.Fatal("a notice of old news revived the run")
	}
	// Another process claims and completes the step, straight in the
	// store: this engine hears of it only by the notice.
	tasks, err := env.Store.TaskClaim(t.Context(), &store.TaskClaimParams{Owner: "other-process",
		Steps: []store.StepQuota{{Name: "elsewhere", Limit: 1}}, LeaseTTL: time.Minute})
	if err != nil || len(tasks) != 1 {
		t.Fatalf("claim: %v, %d tasks", err, len(tasks))
	}
	o, err := env.Store.TaskComplete(t.Context(), &store.TaskCompleteParams{TaskID: tasks[0].ID, Token: tasks[0].Token,
		Output: []byte(`"done elsewhere"`), Attempt: tasks[0].Attempt})
	if err != nil {
		t.Fatal(err)
	}
	last := o.Events[len(o.Events)-1].Seq
	env.Engine.Notify(store.Notice{Kind: store.NoticeOutcome, RunID: "r", Owner: o.Owner, Seq: last})
	if run := env.Wait("r"); run.Status != reprise.RunCompleted || string(run.Output) != `"done elsewhere"` {
		t.Fatalf("run %s, output %s", run.Status, run.Output)
	}
}

// silentNotifier is a store that says it sends notices and never does:
// every notice is lost.
type silentNotifier struct{ store.Store }

func (silentNotifier) Listen(ctx context.Context, _ func(store.Notice)) error {
	<-ctx.Done()
	return nil
}

// TestParkedRunPollsForLostNotices: a parked run whose step another
// process completed, and whose notice was lost, reads its history now
// and then, and goes on.
func TestParkedRunPollsForLostNotices(t *testing.T) {
	t.Parallel()
	wf := reprise.NewWorkflow("parked-polls", func(ctx context.Context, _ int) (string, error) {
		return reprise.Call[string](ctx, "elsewhere", 0)
	})
	idler := reprise.NewWorkflow("parked-idler", func(ctx context.Context, _ int) (string, error) {
		return reprise.WaitSignal[string](ctx, "end").Get(ctx)
	})
	c := clock.NewFake(reprisetest.Start)
	st := memory.New(memory.Options{Now: c.Now})
	t.Cleanup(func() { st.Close() })
	// reprisetest.NewOn would hide the store's Listen: the clock is moved
	// here, each time the engine has done what the last move brought.
	o := &idleness{}
	e := reprisetest.Run(t, reprise.Config{Store: silentNotifier{st}, Clock: c, Observer: o, MaxResidentRuns: 1,
		RunLeaseTTL: time.Minute, PollInterval: time.Second}, wf, idler)
	if err := e.RegisterRemoteStep("elsewhere", nil); err != nil {
		t.Fatal(err)
	}
	for _, start := range []struct{ wf, id string }{{wf.Name(), "r"}, {idler.Name(), "idler"}} {
		if _, _, err := e.StartRun(t.Context(), start.wf, nil, reprise.WithRunID(start.id)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return e.Parked("r") })
	tasks, err := st.TaskClaim(t.Context(), &store.TaskClaimParams{Owner: "other-process",
		Steps: []store.StepQuota{{Name: "elsewhere", Limit: 1}}, LeaseTTL: time.Hour})
	if err != nil || len(tasks) != 1 {
		t.Fatalf("claim: %v, %d tasks", err, len(tasks))
	}
	if _, err := st.TaskComplete(t.Context(), &store.TaskCompleteParams{TaskID: tasks[0].ID, Token: tasks[0].Token,
		Output: []byte(`"done elsewhere"`), Attempt: tasks[0].Attempt}); err != nil {
		t.Fatal(err)
	}
	finished := func() bool {
		run, err := st.RunGet(t.Context(), "r")
		return err == nil && run.Status.Final()
	}
	// A second at a time, up to two RunLeaseTTLs: the parked run polls a
	// third of RunLeaseTTL after it parked, then less often.
	for i := 0; i < 120 && !finished(); i++ {
		c.Advance(time.Second)
		still := 0
		waitFor(t, func() bool { // the engine took the time and is idle again, a few looks in a row
			if c.Pending() == 0 && o.idle() {
				still++
			} else {
				still = 0
			}
			return still >= 5
		})
	}
	waitFor(t, finished)
	run, err := st.RunGet(t.Context(), "r")
	if err != nil || run.Status != reprise.RunCompleted || string(run.Output) != `"done elsewhere"` {
		t.Fatalf("run %+v, %v", run, err)
	}
	if took := c.Now().Sub(reprisetest.Start); took > time.Minute {
		t.Errorf("the run heard of its step %v after it parked; want its first poll, a third of RunLeaseTTL", took)
	}
}
