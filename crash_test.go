package reprise_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"reprise"
	"reprise/sqlite"
	"reprise/store"
)

// The crash tests run a workload in a child process (this test binary,
// re-executed), kill it with SIGKILL at a chosen moment, run it again on the
// same database, and check from the database and from a log of side effects
// that nothing was lost or done twice.

const crashSteps = 3 // steps per run

// crashEffect is a step whose side effect is a line in the effects file,
// written and synced before the step returns.
func crashEffect(scenario, effects string) *reprise.StepDef[int, string] {
	return reprise.NewStep("effect", func(ctx context.Context, n int) (string, error) {
		info, _ := reprise.StepInfoFrom(ctx)
		line := fmt.Sprintf("%s %d %d %s\n", info.RunID, info.Position, info.Attempt, info.IdempotencyKey)
		if err := appendSync(effects, line); err != nil {
			return "", err
		}
		switch scenario {
		case "during-step":
			select {
			case <-time.After(150 * time.Millisecond):
			case <-ctx.Done():
				return "", context.Cause(ctx)
			}
		case "after-effect":
			if info.RunID == "run-0" && info.Position == 2 && info.Attempt == 1 {
				if err := syscall.Kill(syscall.Getpid(), syscall.SIGKILL); err != nil {
					return "", fmt.Errorf("kill own process: %w", err)
				}
				select {} // the kill is on its way
			}
		case "backoff", "backoff-parked":
			if info.Position == 2 && info.Attempt == 1 {
				return "", errors.New("first try fails")
			}
		}
		return fmt.Sprintf("done %d", n), nil
	}, reprise.WithPolicyText("[retry: 5, backoff: 10s, backoff_kind: fixed]"))
}

func appendSync(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteString(line); err != nil {
		return err
	}
	return f.Sync()
}

var crashWorkflow = reprise.NewWorkflow("crash", func(ctx context.Context, n int) (string, error) {
	var out string
	for i := range crashSteps {
		s, err := reprise.Call[string](ctx, "effect", n*10+i)
		if err != nil {
			return "", err
		}
		out += s + ";"
	}
	return out, nil
})

// TestCrashChild is the child process; it does nothing in a normal run.
//
//nolint:paralleltest // a crash test's child process: alone in its process, which it SIGKILLs
func TestCrashChild(t *testing.T) {
	scenario := os.Getenv("REPRISE_CRASH_CHILD")
	if scenario == "" {
		t.Skip("only runs as the child of a crash test")
	}
	db, effects := os.Getenv("REPRISE_CRASH_DB"), os.Getenv("REPRISE_CRASH_EFFECTS")
	runs, err := strconv.Atoi(os.Getenv("REPRISE_CRASH_RUNS"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(t.Context(), db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// The parent reads the database once it is set up (WAL mode on, schema
	// migrated): opening it while this process turns WAL on can fail.
	if err := os.WriteFile(db+".ready", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := reprise.Config{
		Store: st, LeaseTTL: time.Second, RunLeaseTTL: time.Second, PollInterval: 100 * time.Millisecond,
	}
	if scenario == "backoff-parked" {
		cfg.MaxResidentRuns = 2 // the runs in backoff are evicted, but two
	}
	e, err := reprise.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(crashWorkflow, crashEffect(scenario, effects)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	if scenario == "backoff-parked" {
		// Tell the parent how many runs are resident (not evicted).
		go func() {
			for ctx.Err() == nil {
				_ = os.WriteFile(db+".resident", []byte(strconv.Itoa(e.ResidentRuns())), 0o644)
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	for i := range runs {
		if _, _, err := e.StartRun(ctx, "crash", []byte(strconv.Itoa(i)), reprise.WithRunID(fmt.Sprintf("run-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range runs {
		if _, err := e.WaitRun(ctx, fmt.Sprintf("run-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

type crashChild struct {
	t        *testing.T
	scenario string
	dir      string
	runs     int
}

func (c *crashChild) db() string      { return filepath.Join(c.dir, "crash.db") }
func (c *crashChild) effects() string { return filepath.Join(c.dir, "effects.log") }

func (c *crashChild) start() *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(),
		"REPRISE_CRASH_CHILD="+c.scenario, "REPRISE_CRASH_DB="+c.db(),
		"REPRISE_CRASH_EFFECTS="+c.effects(), "REPRISE_CRASH_RUNS="+strconv.Itoa(c.runs))
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			c.t.Error(err)
		}
		if c.t.Failed() {
			c.t.Logf("child output:\n%s", out)
		}
	})
	return cmd
}

// history reads every run's history from the database, as it is now.
func (c *crashChild) history() map[string][]reprise.Event {
	st, err := sqlite.Open(c.t.Context(), c.db(), nil)
	if err != nil {
		c.t.Fatal(err)
	}
	defer st.Close()
	all := map[string][]reprise.Event{}
	for i := range c.runs {
		id := fmt.Sprintf("run-%d", i)
		events, err := st.HistoryList(c.t.Context(), &store.HistoryListParams{RunID: id})
		if err != nil && !errors.Is(err, reprise.ErrNotFound) {
			c.t.Fatal(err)
		}
		all[id] = events
	}
	return all
}

// waitHistory polls the database until cond holds.
func (c *crashChild) waitHistory(cond func(map[string][]reprise.Event) bool) {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(c.db() + ".ready"); err == nil {
			if cond(c.history()) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatal("child did not reach the expected state within 60s")
}

// effectCount counts the side effects per idempotency key, and checks that
// every line's key is that of its run and position.
func (c *crashChild) effectCount() map[string]int {
	f, err := os.Open(c.effects())
	if err != nil {
		if os.IsNotExist(err) {
			return map[string]int{}
		}
		c.t.Fatal(err)
	}
	defer f.Close()
	counts := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 4 {
			c.t.Fatalf("torn effects line %q", sc.Text())
		}
		counts[fields[0]+"/"+fields[1]+"/"+fields[3]]++
	}
	return counts
}

func completedKeys(h map[string][]reprise.Event) map[string]bool {
	keys := map[string]bool{}
	for id, events := range h {
		scheduled := map[int]string{}
		for _, ev := range events {
			switch ev.Type {
			case store.EventStepScheduled:
				scheduled[ev.Position] = ev.IdempotencyKey
			case store.EventStepCompleted:
				keys[fmt.Sprintf("%s/%d/%s", id, ev.Position, scheduled[ev.Position])] = true
			}
		}
	}
	return keys
}

func killChild(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Wait reports the kill as an *exec.ExitError; anything else went wrong.
	var exit *exec.ExitError
	if err := cmd.Wait(); err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
}

// checkCrashOutcome runs the child to the end and checks the invariants.
func (c *crashChild) finish(completedAtKill map[string]bool, effectsAtKill map[string]int) map[string][]reprise.Event {
	t := c.t
	cmd := c.start()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("restarted child: %v", err)
	}
	h := c.history()
	effects := c.effectCount()
	for id, events := range h {
		if n := len(events); n == 0 || events[n-1].Type != store.EventRunCompleted {
			t.Errorf("%s did not complete: %+v", id, events)
			continue
		}
		seen := map[int]int{}
		for i, ev := range events {
			if ev.Seq != int64(i+1) {
				t.Errorf("%s: event %d has seq %d", id, i, ev.Seq)
			}
			if ev.Type == store.EventStepCompleted {
				seen[ev.Position]++
			}
		}
		for pos := 1; pos <= crashSteps; pos++ {
			if seen[pos] != 1 {
				t.Errorf("%s position %d completed %d times, want once", id, pos, seen[pos])
			}
		}
	}
	for key := range completedKeys(h) {
		if effects[key] == 0 {
			t.Errorf("step %s completed but its side effect ran under another key", key)
		}
	}
	for key := range completedAtKill {
		if effects[key] != effectsAtKill[key] {
			t.Errorf("step %s had completed before the kill but ran again (%d → %d)", key, effectsAtKill[key], effects[key])
		}
	}
	return h
}

func TestCrashDuringStep(t *testing.T) {
	t.Parallel()
	c := &crashChild{t: t, scenario: "during-step", dir: t.TempDir(), runs: 20}
	cmd := c.start()
	c.waitHistory(func(h map[string][]reprise.Event) bool {
		started := 0
		for _, events := range h {
			for _, ev := range events {
				if ev.Type == store.EventStepCompleted {
					started++
				}
			}
		}
		return started >= 15
	})
	killChild(t, cmd)
	h := c.history() // what the database holds after the kill
	inFlight := 0
	for _, events := range h {
		open := map[int]bool{}
		for _, ev := range events {
			switch ev.Type {
			case store.EventAttemptStarted:
				open[ev.Position] = true
			case store.EventStepCompleted:
				delete(open, ev.Position)
			}
		}
		inFlight += len(open)
	}
	if inFlight == 0 {
		t.Fatal("no step was running at the kill; the test proves nothing")
	}
	c.finish(completedKeys(h), c.effectCount())
}

func TestCrashAfterEffectBeforeOutcome(t *testing.T) {
	t.Parallel()
	c := &crashChild{t: t, scenario: "after-effect", dir: t.TempDir(), runs: 1}
	cmd := c.start()
	err := cmd.Wait() // the step kills its own process
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want killed by SIGKILL", err)
	}
	h := c.history()
	effects := c.effectCount()
	h = c.finish(completedKeys(h), effects)
	// The interrupted step ran twice, both times under the key the history has.
	key := completedKeysAt(h, "run-0", 2)
	if n := c.effectCount()[key]; n != 2 {
		t.Errorf("step at position 2 ran %d times under key %s, want 2 (once before the kill, once after)", n, key)
	}
}

func completedKeysAt(h map[string][]reprise.Event, id string, pos int) string {
	for _, ev := range h[id] {
		if ev.Type == store.EventStepScheduled && ev.Position == pos {
			return fmt.Sprintf("%s/%d/%s", id, pos, ev.IdempotencyKey)
		}
	}
	return ""
}

func TestCrashDuringBackoff(t *testing.T) {
	t.Parallel()
	c := &crashChild{t: t, scenario: "backoff", dir: t.TempDir(), runs: 1}
	cmd := c.start()
	var retryAt time.Time
	c.waitHistory(func(h map[string][]reprise.Event) bool {
		for _, ev := range h["run-0"] {
			if ev.Type == store.EventAttemptFailed {
				retryAt = ev.RetryAt
				return true
			}
		}
		return false
	})
	time.Sleep(2 * time.Second)
	killChild(t, cmd)
	time.Sleep(time.Second)
	restart := time.Now()
	h := c.finish(nil, nil)
	var second time.Time
	for _, ev := range h["run-0"] {
		if ev.Type == store.EventAttemptStarted && ev.Position == 2 && ev.Attempt == 2 {
			second = ev.At
		}
	}
	if second.IsZero() {
		t.Fatal("no second attempt")
	}
	if second.Before(retryAt) {
		t.Errorf("retry started %v before its planned time (restart was %v before it)", retryAt.Sub(second), retryAt.Sub(restart))
	}
	if late := second.Sub(retryAt); late > 1500*time.Millisecond {
		t.Errorf("retry started %v after its planned time", late)
	}
}

// TestCrashWhileParked: runs evicted from memory while they wait in a
// backoff (MaxResidentRuns), their process killed, resume from the
// database as resident ones do: each retry starts at its planned time, not
// before, and every step's effect happens once per attempt.
func TestCrashWhileParked(t *testing.T) {
	t.Parallel()
	const runs = 20
	c := &crashChild{t: t, scenario: "backoff-parked", dir: t.TempDir(), runs: runs}
	cmd := c.start()
	retryAt := map[string]time.Time{}
	c.waitHistory(func(h map[string][]reprise.Event) bool {
		for id, events := range h {
			for _, ev := range events {
				if ev.Type == store.EventAttemptFailed {
					retryAt[id] = ev.RetryAt
				}
			}
		}
		return len(retryAt) == runs
	})
	time.Sleep(3 * time.Second) // into the backoffs, past the 2 s within which a run is not evicted
	killChild(t, cmd)
	b, err := os.ReadFile(c.db() + ".resident")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := strconv.Atoi(string(b)); err != nil || n >= runs/2 {
		t.Fatalf("%s runs resident as the child was killed (%v), want most of the %d evicted", b, err, runs)
	}
	h := c.finish(nil, nil)
	for id, events := range h {
		var second time.Time
		for _, ev := range events {
			if ev.Type == store.EventAttemptStarted && ev.Position == 2 && ev.Attempt == 2 {
				second = ev.At
			}
		}
		switch {
		case second.IsZero():
			t.Errorf("%s: no second attempt", id)
		case second.Before(retryAt[id]):
			t.Errorf("%s: retry started %v before its planned time", id, retryAt[id].Sub(second))
		case second.Sub(retryAt[id]) > 5*time.Second:
			t.Errorf("%s: retry started %v after its planned time", id, second.Sub(retryAt[id]))
		}
	}
}
