// Package reprisetest runs workflows in tests on a real embedded store
// (SQLite, or the in-memory reference store) and a fake clock that jumps
// ahead whenever the engine is idle, so a test of a policy with hour-long
// backoffs takes milliseconds and sleeps never.
package reprisetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reprise"
	"reprise/clock"
	"reprise/memory"
	"reprise/sqlite"
	"reprise/store"
)

// Start is where every Env's clock starts.
var Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// An Env is an engine running with a fake clock on a store of its own:
// SQLite in a temporary directory (New), memory (NewMemory), or one the
// caller opened (NewOn). It stops when the test ends.
type Env struct {
	Engine *reprise.Engine
	Clock  *clock.Fake
	Store  store.Store
	t      testing.TB
	stop   func()
	// watch hears the engine's Observer events: whether it is busy.
	watch *watcher
	// wakes is Store as the engine sees it: it keeps the steps the
	// engine asks the store about.
	wakes *wakes
}

// New starts an engine with the given definitions, on SQLite. cfg may be
// nil; its Store and Clock are set by New.
func New(t testing.TB, cfg *reprise.Config, defs ...reprise.Definition) *Env {
	t.Helper()
	c := clock.NewFake(Start)
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "reprise.db"), &sqlite.Options{Now: c.Now})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return newEnv(t, cfg, defs, c, st)
}

// NewMemory is New on the in-memory reference store (package memory)
// instead of SQLite: nothing goes to disk, and each step costs less.
func NewMemory(t testing.TB, cfg *reprise.Config, defs ...reprise.Definition) *Env {
	t.Helper()
	c := clock.NewFake(Start)
	st := memory.New(memory.Options{Now: c.Now})
	t.Cleanup(func() { st.Close() })
	return newEnv(t, cfg, defs, c, st)
}

// NewOn is New on a store the caller opened on c's clock (PostgreSQL, say:
// postgres.Options.Now = c.Now), and closes when the test ends, after the
// engine stops (register the close with t.Cleanup before calling NewOn).
func NewOn(t testing.TB, st store.Store, c *clock.Fake, cfg *reprise.Config, defs ...reprise.Definition) *Env {
	t.Helper()
	return newEnv(t, cfg, defs, c, st)
}

// newEnv starts an engine on st, whose clock is c, and stops it when the
// test ends (before cleanups registered earlier, such as st's close).
func newEnv(t testing.TB, cfg *reprise.Config, defs []reprise.Definition, c *clock.Fake, st store.Store) *Env {
	t.Helper()
	env := &Env{Clock: c, Store: st, t: t}
	env.start(cfg, defs)
	t.Cleanup(env.Stop)
	return env
}

func (env *Env) start(cfg *reprise.Config, defs []reprise.Definition) {
	env.t.Helper()
	var c reprise.Config
	if cfg != nil {
		c = *cfg
	}
	env.wakes = &wakes{Store: env.Store}
	c.Store, c.Clock = env.wakes, env.Clock
	// The clock moves when the engine says it is idle; the test's own
	// Observer, if any, hears every event too.
	env.watch = &watcher{next: c.Observer}
	if c.Observer == nil {
		env.watch.next = reprise.NopObserver{}
	}
	c.Observer = env.watch
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(testWriter{env.t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	// Periodic work (polls, renewals, heartbeats, the watch for steps
	// nobody claims) would make the clock crawl from one to the next;
	// nothing in one process needs it often. Wait finds a step that
	// nothing registered at once.
	for _, d := range []*time.Duration{&c.LeaseTTL, &c.RunLeaseTTL, &c.PollInterval, &c.UnclaimedAfter} {
		if *d == 0 {
			*d = 24 * time.Hour
		}
	}
	e, err := reprise.New(c)
	if err != nil {
		env.t.Fatalf("new engine: %v", err)
	}
	if err := e.Register(defs...); err != nil {
		env.t.Fatalf("register: %v", err)
	}
	// The engine outlives the test's context, which ends before the
	// cleanups run: the one that stops it among them.
	ctx, cancel := context.WithCancel(context.WithoutCancel(env.t.Context()))
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	// Runs started before the engine runs are created unowned, for a
	// claim: a test starts its runs on a running engine, as a program
	// whose engine has started does.
	select {
	case <-e.Ready():
	case err := <-done:
		cancel()
		env.t.Fatalf("engine stopped as it started: %v", err)
	}
	env.Engine = e
	env.stop = func() {
		cancel()
		if err := <-done; err != nil {
			env.t.Errorf("engine: %v", err)
		}
	}
}

// Stop stops the engine, as a process that shuts down would. It is safe to
// call more than once.
func (env *Env) Stop() {
	if env.stop != nil {
		env.stop()
		env.stop = nil
	}
}

// Restart stops the engine and starts a new one on the same store and
// clock, with new definitions: the runs in flight are replayed from their
// histories by the new code, as after a deploy or a crash.
func (env *Env) Restart(cfg *reprise.Config, defs ...reprise.Definition) {
	env.t.Helper()
	env.Stop()
	env.start(cfg, defs)
}

// Wait drives the clock until run id finishes, and returns it. It fails
// the test if the run can make no more progress or takes more than a
// minute of real time, and at once if the run (or a child run of it)
// waits for a step that nothing registered with the engine: no Go step,
// no remote step.
func (env *Env) Wait(id string) *store.Run {
	env.t.Helper()
	run, err := env.WaitErr(id)
	if err != nil {
		env.t.Fatal(err)
	}
	return run
}

// WaitErr is Wait returning its failure.
func (env *Env) WaitErr(id string) (*store.Run, error) {
	var run *store.Run
	err := env.driveUntil(func() (bool, error) {
		var err error
		run, err = env.Store.RunGet(env.t.Context(), id)
		if err != nil {
			return false, fmt.Errorf("get run %s: %w", id, err)
		}
		return run.Status.Final(), nil
	}, func(idle bool) error {
		w, err := env.waiting(id)
		switch {
		case err != nil || w == nil:
			return err
		case w.Why == reprise.WhyNotRegistered || !idle:
			// Nothing could ever claim it; or, at the end, it is the
			// likely reason the run did not finish.
			return fmt.Errorf("%s waits for %s", w.who, &w.Waiting)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	return run, nil
}

// runWaiting is a step a run waits for.
type runWaiting struct {
	store.Waiting
	// who names the run: "run ID", or "its child run ID".
	who string
}

// waiting returns the step that run id or a child run of it (whose ids
// extend its own) has waited for longest, ready and unclaimed, if any;
// a step that nothing registered comes first.
func (env *Env) waiting(id string) (*runWaiting, error) {
	tasks, err := env.Store.TaskListWaiting(env.t.Context(), &store.TaskListWaitingParams{Limit: 1000})
	if err != nil {
		return nil, fmt.Errorf("list waiting steps: %w", err)
	}
	var found *runWaiting
	for _, t := range tasks {
		if t.RunID != id && !strings.HasPrefix(t.RunID, id+"/") {
			continue
		}
		w := &runWaiting{who: "run " + t.RunID, Waiting: store.Waiting{Step: t.Step, Position: t.Position, Since: t.ReadyAt,
			Why: reprise.WhyNotClaimed}}
		if t.RunID != id {
			w.who = "its child run " + t.RunID
		}
		if !env.Engine.HasStep(t.Step) {
			w.Why = reprise.WhyNotRegistered
			return w, nil
		}
		if found == nil {
			found = w
		}
	}
	return found, nil
}

// AdvanceUntil drives the clock, as Wait does, until cond holds.
func (env *Env) AdvanceUntil(cond func() bool) {
	env.t.Helper()
	if err := env.driveUntil(func() (bool, error) { return cond(), nil }, nil); err != nil {
		env.t.Fatal(err)
	}
}

// Settle waits, without moving the clock, until the engine is idle, as
// Wait judges it before it moves the clock while attempts are in step
// code: whatever the engine does at the clock's time is done then. A test
// calls it before it checks that something did not happen. It fails the
// test if the engine is not idle within a minute of real time.
func (env *Env) Settle() {
	env.t.Helper()
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(500 * time.Microsecond)
	defer tick.Stop()
	s := stillness{last: -1}
	for polls, _ := s.poll(env); polls < 40; polls, _ = s.poll(env) {
		if time.Now().After(deadline) {
			env.t.Fatal("the engine was not idle within a minute of real time")
		}
		<-tick.C
	}
}

// stillness counts the polls in a row at which the engine was idle: it
// said so (EngineIdle), no timer it fired was unanswered, and it had said
// nothing since the poll before.
type stillness struct {
	last  int64 // the count of the engine's events at the last poll
	polls int
}

// poll looks at the engine once. It returns the polls in a row it has been
// idle, and the attempts it said were in step code.
func (s *stillness) poll(env *Env) (polls, steps int) {
	busy, steps, progress := env.watch.state()
	if !busy && env.Clock.Pending() == 0 && progress == s.last {
		s.polls++
	} else {
		s.polls = 0
	}
	s.last = progress
	return s.polls, steps
}

// driveUntil moves the clock to its next timer whenever the engine is idle,
// until done says so. Idle means: the engine says it is (EngineIdle), no
// fired timer is unhandled, and the engine said nothing over a few polls;
// while an attempt is inside step code (which may be waiting for its
// timeout) it waits longer for the step to finish by itself. stuck, when
// not nil, is asked each time the engine is idle (idle true), and once
// more when driveUntil gives up (false): an error it returns ends the
// drive, or says why.
func (env *Env) driveUntil(done func() (bool, error), stuck func(idle bool) error) error {
	giveUp := func(why string) error {
		if stuck != nil {
			if err := stuck(false); err != nil {
				return fmt.Errorf("%s: %w", why, err)
			}
		}
		return errors.New(why)
	}
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(500 * time.Microsecond)
	defer tick.Stop()
	s := stillness{last: -1}
	for time.Now().Before(deadline) {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		stable, steps := s.poll(env)
		// A goroutine between taking a timer's tick and marking itself
		// busy looks idle; enough polls make that window harmless.
		need := 10
		if steps > 0 {
			need = 40
		}
		if stable >= need {
			if stuck != nil && stable == need {
				if err := stuck(true); err != nil {
					return err
				}
			}
			next, ok, due := env.next()
			if due && stable >= 1000 {
				// Due work the engine does not take (it is full of attempts
				// waiting for their timeouts): let the clock move. Half a
				// second of real time: a machine busy with other tests can
				// keep the engine from acting for a tenth of one.
				next, ok = env.Clock.Next()
				due = false
			}
			switch {
			case due:
				// Keep counting: the engine should act on it soon.
			case !ok:
				return giveUp("nothing is pending and the condition does not hold")
			default:
				env.Clock.Set(next)
				s.polls = 0
			}
		}
		<-tick.C
	}
	return giveUp("condition not met within a minute of real time")
}

// next is the time to move the clock to: the earliest of the clock's timers
// and of what the store says comes due next for the engine: its timers, its
// leases, and the ready tasks of the steps it asked the store about last
// (those it would claim: its own steps, less those at their concurrency
// limit). The store is the truth: a retry's ready time is there as soon as
// it is committed, even before the engine has set its timer for it. When
// something is due already, the engine has yet to act on it and the clock
// must wait (ok is false, due true).
func (env *Env) next() (next time.Time, ok, due bool) {
	next, ok = env.Clock.Next()
	w, err := env.Store.NextWake(env.t.Context(), &store.NextWakeParams{Steps: env.wakes.steps()})
	if err != nil {
		return next, ok, false
	}
	now := env.Clock.Now()
	for _, at := range []time.Time{w.Task, w.Lease, w.Timer} {
		switch {
		case at.IsZero():
		case !at.After(now):
			return time.Time{}, false, true
		case !ok || at.Before(next):
			next, ok = at, true
		}
	}
	return next, ok, false
}

// History returns a run's history.
func (env *Env) History(id string) []store.Event {
	env.t.Helper()
	events, err := env.Engine.History(env.t.Context(), id)
	if err != nil {
		env.t.Fatalf("history of %s: %v", id, err)
	}
	return events
}

// testWriter sends the engine's warnings to the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
