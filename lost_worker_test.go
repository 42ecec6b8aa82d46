package reprise_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"reprise/store"

	"github.com/jackc/pgx/v5"

	"reprise"
	"reprise/postgres"
	"reprise/sqlite"
)

// The lost-worker tests kill an engine process (this test binary, run
// again) with SIGKILL while its step runs or waits out a backoff, start it
// again on the same database, and check that the run goes on at once: the
// attempt the crash cut off failed as WorkerLost, not Timeout (so a policy
// that never retries timeouts retries it), under the same idempotency key,
// and a retry planned before the crash starts at its planned time. The
// engine comes back under the same WorkerID, as a pod of a StatefulSet
// would, or under a new one.

// lostPolicy never retries a timeout, and its timeout is longer than the
// tests: an attempt that fails as Timeout here is a wrong answer.
const lostPolicy = "[retry: 3, backoff: 5s, backoff_kind: fixed] [Timeout -> retry: 0] [timeout: 30s]"

// TestLostWorkerChild is the engine process; it does nothing in a normal run.
//
//nolint:paralleltest // a lost-worker test's child process: alone in its process, which its parent SIGKILLs
func TestLostWorkerChild(t *testing.T) {
	scenario := os.Getenv("REPRISE_LOST_CHILD")
	if scenario == "" {
		t.Skip("only runs as the child of a lost-worker test")
	}
	effects := os.Getenv("REPRISE_LOST_EFFECTS")
	st := openLostStore(t, os.Getenv("REPRISE_LOST_STORE"))
	defer st.Close()
	if err := os.WriteFile(effects+".ready", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	slow := reprise.NewStep("slow", func(ctx context.Context, _ int) (string, error) {
		info, _ := reprise.StepInfoFrom(ctx)
		if err := appendSync(effects, fmt.Sprintf("%d %s\n", info.Attempt, info.IdempotencyKey)); err != nil {
			return "", err
		}
		if info.Attempt == 1 {
			if scenario == "backoff" {
				return "", errors.New("first try fails")
			}
			<-ctx.Done() // until the kill
			return "", context.Cause(ctx)
		}
		return "done", nil
	}, reprise.WithPolicyText(lostPolicy))
	wf := reprise.NewWorkflow("lost", func(ctx context.Context, n int) (string, error) {
		return reprise.Step(ctx, slow, n)
	})
	e, err := reprise.New(reprise.Config{Store: st, WorkerID: os.Getenv("REPRISE_LOST_WORKER_ID"), PollInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(wf, slow); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	if _, _, err := e.StartRun(ctx, "lost", []byte("1"), reprise.WithRunID("run-0")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitRun(ctx, "run-0"); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// openLostStore opens "sqlite:PATH" or "postgres:SCHEMA" (on the test
// database).
func openLostStore(t *testing.T, spec string) store.Store {
	t.Helper()
	kind, arg, _ := strings.Cut(spec, ":")
	var (
		st  store.Store
		err error
	)
	if kind == "postgres" {
		st, err = postgres.Open(t.Context(), os.Getenv("REPRISE_TEST_POSTGRES"), &postgres.Options{Schema: arg})
	} else {
		st, err = sqlite.Open(t.Context(), arg, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestLostWorker(t *testing.T) {
	t.Parallel()
	stores := []string{"sqlite"}
	if os.Getenv("REPRISE_TEST_POSTGRES") != "" {
		stores = append(stores, "postgres")
	}
	for _, kind := range stores {
		for _, id := range []string{"fixed", "new"} {
			for _, scenario := range []string{"mid-step", "backoff"} {
				t.Run(kind+"/"+id+"-worker-id/"+scenario, func(t *testing.T) {
					t.Parallel()
					testLostWorker(t, kind, id == "fixed", scenario)
				})
			}
		}
	}
}

func testLostWorker(t *testing.T, kind string, fixedID bool, scenario string) {
	dir := t.TempDir()
	spec := "sqlite:" + filepath.Join(dir, "lost.db")
	if kind == "postgres" {
		schema := fmt.Sprintf("reprise_lost_%d", time.Now().UnixNano())
		spec = "postgres:" + schema
		t.Cleanup(func() { dropSchema(t, schema) })
	}
	effects := filepath.Join(dir, "effects.log")
	env := append(os.Environ(), "REPRISE_LOST_CHILD="+scenario, "REPRISE_LOST_STORE="+spec, "REPRISE_LOST_EFFECTS="+effects)
	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLostWorkerChild$", "-test.count=1")
		cmd.Env = env
		if fixedID {
			cmd.Env = append(cmd.Env, "REPRISE_LOST_WORKER_ID=pod-0")
		}
		out := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
				t.Error(err)
			}
			if t.Failed() {
				t.Logf("child output:\n%s", out)
			}
		})
		return cmd
	}
	history := func() []reprise.Event {
		if _, err := os.Stat(effects + ".ready"); err != nil {
			return nil
		}
		st := openLostStore(t, spec)
		defer st.Close()
		events, err := st.HistoryList(t.Context(), &store.HistoryListParams{RunID: "run-0"})
		if err != nil && !errors.Is(err, reprise.ErrNotFound) {
			t.Fatal(err)
		}
		return events
	}

	first := start()
	var retryAt time.Time
	waitForChild(t, func() bool {
		for _, ev := range history() {
			switch {
			case scenario == "mid-step" && ev.Type == store.EventAttemptStarted:
				return lineCount(t, effects) == 1 // the step is in its code
			case scenario == "backoff" && ev.Type == store.EventAttemptFailed:
				retryAt = ev.RetryAt
				return true
			}
		}
		return false
	})
	if scenario == "backoff" {
		time.Sleep(time.Until(retryAt.Add(-3 * time.Second))) // into the backoff, 3 s before the retry
	}
	killChild(t, first)

	restarted := time.Now()
	second := start()
	finished := make(chan error, 1)
	go func() { finished <- second.Wait() }()
	// Leases and timeouts here are 30 s: a run that waits for them is
	// stranded for this test's purpose.
	select {
	case err := <-finished:
		if err != nil {
			t.Fatalf("restarted engine: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the run did not finish within 20 s of the restart: it waited for a lease to lapse")
	}

	events := history()
	if n := len(events); n == 0 || events[n-1].Type != store.EventRunCompleted {
		t.Fatalf("run did not complete: %+v", events)
	}
	var failed []reprise.Event
	var key string
	var second2 time.Time
	for _, ev := range events {
		switch ev.Type {
		case store.EventStepScheduled:
			key = ev.IdempotencyKey
		case store.EventAttemptFailed:
			failed = append(failed, ev)
		case store.EventAttemptStarted:
			if ev.Attempt == 2 {
				second2 = ev.At
			}
		}
	}
	if len(failed) != 1 {
		t.Fatalf("%d failed attempts, want 1: %+v", len(failed), failed)
	}
	wantType := reprise.TypeWorkerLost
	if scenario == "backoff" {
		wantType = "errorString"
	}
	if got := failed[0].Error.Type; got != wantType {
		t.Errorf("attempt 1 failed as %s (%s), want %s", got, failed[0].Error.Message, wantType)
	}
	if scenario == "backoff" {
		if second2.Before(retryAt) {
			t.Errorf("the retry started %v before its planned time", retryAt.Sub(second2))
		}
		if late := second2.Sub(retryAt); late > 1500*time.Millisecond {
			t.Errorf("the retry started %v after its planned time (restart %v before it)", late, retryAt.Sub(restarted))
		}
	}
	for _, line := range lines(t, effects) {
		if !strings.HasSuffix(line, " "+key) {
			t.Errorf("an attempt ran under %q, want the step's key %s", line, key)
		}
	}
}

// waitForChild polls the child's database until cond holds.
func waitForChild(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("the child did not reach the expected state within 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func lines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

func lineCount(t *testing.T, path string) int { return len(lines(t, path)) }

// dropSchema runs in a t.Cleanup, when t.Context() is already done.
func dropSchema(t *testing.T, schema string) {
	ctx := context.WithoutCancel(t.Context())
	conn, err := pgx.Connect(ctx, os.Getenv("REPRISE_TEST_POSTGRES"))
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
		t.Error(err)
	}
}

// TestSecondEngineUnderOneWorkerID: two live engines under one id are a
// misconfiguration, refused at the second's start; once the first stops,
// the id is free.
func TestSecondEngineUnderOneWorkerID(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "one.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ping := reprise.NewWorkflow("ping", func(context.Context, int) (int, error) { return 1, nil })
	newEngine := func() *reprise.Engine {
		e, err := reprise.New(reprise.Config{Store: st, WorkerID: "pod-0"})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Register(ping); err != nil {
			t.Fatal(err)
		}
		return e
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	first := newEngine()
	go func() { done <- first.Run(ctx) }()
	if _, err := ping.Run(t.Context(), first, 0); err != nil { // the first is up
		t.Fatal(err)
	}
	err = newEngine().Run(t.Context())
	if !errors.Is(err, reprise.ErrEngineLive) || !strings.Contains(err.Error(), "pod-0") {
		t.Fatalf("second engine's Run = %v, want ErrEngineLive naming pod-0", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("first engine: %v", err)
	}
	ctx, cancel = context.WithCancel(t.Context())
	cancel() // starts, then stops at once
	if err := newEngine().Run(ctx); err != nil {
		t.Fatalf("an engine under the freed id: %v", err)
	}
}

// TestShutdownGraceThenRetryAfterRestart: an engine that stops cancels the
// attempts still running after its grace with ErrShutdown and records
// nothing; their leases lapse, and the next engine retries them as lost.
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
	env := newEnv(t, cfg, wf, hang)
	h, err := wf.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
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
