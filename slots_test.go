package reprise_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"reprise"
	"reprise/reprisetest"
	"reprise/store"
)

// slowFails is a real store whose first TaskFail waits for release.
type slowFails struct {
	store.Store
	once    sync.Once
	writing chan struct{} // closed when the first TaskFail arrives
	release chan struct{}
}

func (s *slowFails) TaskFail(ctx context.Context, p *store.TaskFailParams) (*store.Outcome, error) {
	s.once.Do(func() {
		close(s.writing)
		<-s.release
	})
	return s.Store.TaskFail(ctx, p)
}

// TestSlotIsFreeWhileOutcomeIsWritten: with one slot, a step runs while
// another's failure is being written, and the retry leased by that write
// still runs once it is recorded.
func TestSlotIsFreeWhileOutcomeIsWritten(t *testing.T) {
	t.Parallel()
	db := tempStore(t)
	st := &slowFails{Store: db, writing: make(chan struct{}), release: make(chan struct{})}
	flaky := failsFirst("flaky", "second time", "[retry: 3, backoff: 0s]")
	quick := reprise.NewStep("quick", func(context.Context, int) (string, error) { return "quick", nil })
	wfFlaky := reprise.NewWorkflow("flaky", func(ctx context.Context, n int) (string, error) { return reprise.Step(ctx, flaky, n) })
	wfQuick := reprise.NewWorkflow("quick", func(ctx context.Context, n int) (string, error) { return reprise.Step(ctx, quick, n) })
	e := reprisetest.Run(t, reprise.Config{Store: st, MaxConcurrentSteps: 1}, flaky, quick, wfFlaky, wfQuick)
	// The engine stops only once the held write is let go.
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(st.release) }) })
	ctx := t.Context()

	hf, err := wfFlaky.Start(ctx, e, 0)
	if err != nil {
		t.Fatal(err)
	}
	<-st.writing
	hq, err := wfQuick.Start(ctx, e, 0)
	if err != nil {
		t.Fatal(err)
	}
	wait, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	if out, err := hq.Result(wait); err != nil || out != "quick" {
		t.Fatalf("quick run: %q, %v while the other step's failure was written; want its result", out, err)
	}
	release.Do(func() { close(st.release) })
	if out, err := hf.Result(wait); err != nil || out != "second time" {
		t.Fatalf("flaky run: %q, %v", out, err)
	}
	events, err := e.History(ctx, hf.ID)
	if err != nil {
		t.Fatal(err)
	}
	if started := eventsOf(events, store.EventAttemptStarted); len(started) != 2 || started[1].Attempt != 2 {
		t.Errorf("attempts started %+v, want 1 and 2", started)
	}
}

// TestBacklogIsClaimedAsRoomAllows: an engine claims the runs of a backlog
// as it has room for their steps' leases, not all at once, and still
// finishes them all.
func TestBacklogIsClaimedAsRoomAllows(t *testing.T) {
	t.Parallel()
	const runs, slots = 60, 2
	gate := make(chan struct{})
	step := reprise.NewStep("gated", func(ctx context.Context, _ int) (int, error) {
		select {
		case <-gate:
			return 1, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	})
	wf := reprise.NewWorkflow("gated", func(ctx context.Context, n int) (int, error) { return reprise.Step(ctx, step, n) })
	const poll = time.Second
	env := newEnv(t, &reprise.Config{MaxConcurrentSteps: slots, PollInterval: poll}, step, wf)
	ctx := t.Context()
	for i := range runs {
		if _, _, err := env.Store.RunCreate(ctx, &store.RunCreateParams{ID: fmt.Sprint("backlog-", i), Workflow: "gated", Input: []byte("0")}); err != nil {
			t.Fatal(err)
		}
	}

	count := func(status reprise.RunStatus) int {
		list, err := env.Store.RunList(ctx, &store.RunListParams{Status: status, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return len(list)
	}
	// Two steps run, the room for leases is 4 × 2: once the engine has
	// claimed what it would, and at each of its polls for runs after,
	// no more than that are claimed.
	env.AdvanceUntil(func() bool { return count(reprise.RunRunning) >= slots })
	for range 5 {
		settle(t, env)
		if n := count(reprise.RunRunning); n > 4*slots {
			t.Fatalf("%d runs claimed while %d steps can run, want at most %d", n, slots, 4*slots)
		}
		env.Clock.Advance(poll)
	}
	close(gate)
	env.AdvanceUntil(func() bool { return count(reprise.RunCompleted) == runs })
}

// holdsAdvances is a real store whose advances that schedule steps wait
// for release.
type holdsAdvances struct {
	store.Store
	held    chan string // the run of each advance held
	release chan struct{}
}

func (s *holdsAdvances) RunAdvance(ctx context.Context, p *store.RunAdvanceParams) (*store.Advanced, error) {
	if len(p.Steps) > 0 {
		s.held <- p.RunID
		<-s.release
	}
	return s.Store.RunAdvance(ctx, p)
}

// TestClaimedRunCountsOnceWhileItsStepIsLeased: a claimed run whose first
// advance, leasing its step, is being written holds the room of one step,
// not two (its claim and its step's reservation), so that another run is
// claimed into the room left.
func TestClaimedRunCountsOnceWhileItsStepIsLeased(t *testing.T) {
	t.Parallel()
	db := tempStore(t)
	st := &holdsAdvances{Store: db, held: make(chan string, 2), release: make(chan struct{})}
	ctx := t.Context()
	if _, _, err := db.RunCreate(ctx, &store.RunCreateParams{ID: "first", Workflow: "one", Input: []byte("0")}); err != nil {
		t.Fatal(err)
	}
	step := reprise.NewStep("one", func(context.Context, int) (int, error) { return 1, nil })
	wf := reprise.NewWorkflow("one", func(ctx context.Context, n int) (int, error) { return reprise.Step(ctx, step, n) })
	reprisetest.Run(t, reprise.Config{Store: st, MaxConcurrentSteps: 2, PollInterval: 10 * time.Millisecond}, step, wf)
	// The engine stops only once the held advances are let go.
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(st.release) }) })

	if id := <-st.held; id != "first" {
		t.Fatalf("advance of %s held, want first", id)
	}
	if _, _, err := db.RunCreate(ctx, &store.RunCreateParams{ID: "second", Workflow: "one", Input: []byte("0")}); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-st.held:
		if id != "second" {
			t.Fatalf("advance of %s held, want second", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second run was not claimed while the first one's step was being leased, with a slot free")
	}
	release.Do(func() { close(st.release) })
	for _, id := range []string{"first", "second"} {
		waitFor(t, func() bool {
			run, err := db.RunGet(ctx, id)
			return err == nil && run.Status == reprise.RunCompleted
		})
	}
}

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

// heldIn is step code that, counted in inside, returns its input once sent
// on proceed.
func heldIn(inside *gauge, proceed <-chan struct{}) func(context.Context, int) (int, error) {
	return func(ctx context.Context, n int) (int, error) {
		inside.enter()
		defer inside.exit()
		select {
		case <-proceed:
			return n, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// sumOf adds the results of fs, in a workflow.
func sumOf(ctx context.Context, fs []*reprise.Future[int]) (int, error) {
	sum := 0
	for _, f := range fs {
		n, err := f.Get(ctx)
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, nil
}

// TestConcurrencyLimits: neither the engine's nor a step's limit is passed,
// also when retries at once are leased with their predecessors' failures
// and must wait for a slot. Every attempt stays in its step until the test
// lets it go, round by round, once no more come: the attempts the engine
// runs at once are all in step code together.
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
	proceed := make(chan struct{})
	var left atomic.Int32 // attempts let go that have left their step
	work := func(g ...*gauge) func(context.Context, int) (int, error) {
		return func(ctx context.Context, n int) (int, error) {
			for _, x := range g {
				x.enter()
			}
			select {
			case <-proceed:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
			for _, x := range g {
				x.exit()
			}
			defer left.Add(1)
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
		return sumOf(ctx, fs)
	})
	env := newEnv(t, &reprise.Config{MaxConcurrentSteps: 5}, wf, narrow, wide)
	h, err := wf.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	ended := func() bool {
		run, err := env.Engine.GetRun(t.Context(), h.ID)
		if err != nil {
			t.Fatal(err)
		}
		return run.Status.Final()
	}
	waitFor(t, func() bool { return all.now.Load() >= 3 }) // several run at once
	for letGo := int32(0); ; {
		settle(t, env)
		inside := all.now.Load()
		if inside == 0 {
			if ended() {
				break
			}
			env.AdvanceUntil(func() bool { return all.now.Load() > 0 || ended() })
			continue
		}
		for range inside {
			select {
			case proceed <- struct{}{}:
			case <-time.After(30 * time.Second):
				t.Fatal("an attempt in step code was not there to let go")
			}
		}
		letGo += inside
		waitFor(t, func() bool { return left.Load() == letGo })
	}
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

// countsWakes is a real store that counts the calls of NextWake.
type countsWakes struct {
	store.Store
	wakes atomic.Int64
}

func (s *countsWakes) NextWake(ctx context.Context, p *store.NextWakeParams) (store.Wake, error) {
	s.wakes.Add(1)
	return s.Store.NextWake(ctx, p)
}

// TestStepAtItsLimitLeavesTheDispatcherAsleep: while a step at its own
// concurrency limit holds back ready tasks of its own, with slots free in
// the engine, the dispatcher sleeps instead of asking the store, again and
// again, for the tasks it would not claim; and it claims the next one as
// soon as the step frees its slot, the clock standing still.
func TestStepAtItsLimitLeavesTheDispatcherAsleep(t *testing.T) {
	t.Parallel()
	fake, db := fakeStore(t)
	st := &countsWakes{Store: db}
	var inside gauge
	proceed := make(chan struct{})
	narrow := reprise.NewStep("narrow", heldIn(&inside, proceed), reprise.WithConcurrency(1))
	const steps = 4
	wf := reprise.NewWorkflow("narrow", func(ctx context.Context, _ int) (int, error) {
		var fs []*reprise.Future[int]
		for i := range steps {
			fs = append(fs, reprise.Go(ctx, narrow, i))
		}
		return sumOf(ctx, fs)
	})
	e := reprisetest.Run(t, reprise.Config{Store: st, Clock: fake, MaxConcurrentSteps: 4, PollInterval: time.Hour}, narrow, wf)
	h, err := wf.Start(t.Context(), e, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range steps {
		waitFor(t, func() bool { return inside.now.Load() == 1 })
		// The dispatcher finishing the pass that claimed this attempt,
		// and kicked by its lease, looks a few times more; one that spins
		// looks thousands of times.
		from, held := st.wakes.Load(), time.Now()
		for time.Since(held) < 100*time.Millisecond {
			if n := st.wakes.Load() - from; n > 10 {
				t.Fatalf("step %d of %d holds the step's one slot: %d NextWake calls within %v, want at most 10",
					i+1, steps, n, time.Since(held).Round(time.Millisecond))
			}
			time.Sleep(time.Millisecond)
		}
		proceed <- struct{}{}
	}
	wait, stop := context.WithTimeout(t.Context(), 30*time.Second)
	defer stop()
	if sum, err := h.Result(wait); err != nil || sum != 0+1+2+3 {
		t.Fatalf("result %d, %v", sum, err)
	}
	if p := inside.peak.Load(); p != 1 {
		t.Errorf("%d attempts ran at once, limit 1", p)
	}
}

// TestLoweredLimitClaimsNoMore: a step registered again with a lower
// concurrency limit than it has attempts running is full, not unlimited:
// the engine claims none of its ready tasks until it is under the limit.
func TestLoweredLimitClaimsNoMore(t *testing.T) {
	t.Parallel()
	var inside gauge
	proceed := make(chan struct{})
	work := heldIn(&inside, proceed)
	wide := reprise.NewStep("narrow", work, reprise.WithConcurrency(2))
	narrow := reprise.NewStep("narrow", work, reprise.WithConcurrency(1))
	const steps = 4
	wf := reprise.NewWorkflow("narrow", func(ctx context.Context, _ int) (int, error) {
		var fs []*reprise.Future[int]
		for i := range steps {
			fs = append(fs, reprise.Go(ctx, wide, i))
		}
		return sumOf(ctx, fs)
	})
	env := newEnv(t, nil, wf, wide)
	h, err := wf.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return inside.now.Load() == 2 })
	if err := env.Engine.Register(narrow); err != nil {
		t.Fatal(err)
	}
	settle(t, env)
	if n := countEvents(env.History(h.ID), store.EventAttemptStarted); n != 2 {
		t.Errorf("%d attempts started (leased) while 2 ran at a limit lowered to 1, want 2", n)
	}
	for range steps {
		proceed <- struct{}{}
	}
	if run := env.Wait(h.ID); run.Status != reprise.RunCompleted {
		t.Fatalf("run %s: %+v", run.Status, run.Error)
	}
}

// failsFirstSchedule is a real store whose first write that schedules
// steps (a run's create with its first advance, or an advance) waits for
// release, then fails.
type failsFirstSchedule struct {
	countsWakes
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

// hold reports whether to fail this write, after release.
func (s *failsFirstSchedule) hold(steps []store.StepSpec) (fail bool) {
	if len(steps) == 0 {
		return false
	}
	s.once.Do(func() {
		fail = true
		s.held <- struct{}{}
		<-s.release
	})
	return fail
}

func (s *failsFirstSchedule) RunCreate(ctx context.Context, p *store.RunCreateParams) (store.RunLease, bool, error) {
	if p.First != nil && s.hold(p.First.Steps) {
		return store.RunLease{}, false, errors.New("store unavailable")
	}
	return s.Store.RunCreate(ctx, p)
}

func (s *failsFirstSchedule) RunAdvance(ctx context.Context, p *store.RunAdvanceParams) (*store.Advanced, error) {
	if s.hold(p.Steps) {
		return nil, errors.New("store unavailable")
	}
	return s.Store.RunAdvance(ctx, p)
}

// TestRoomGivenBackWakesTheDispatcher: a step whose one slot was reserved
// for a step being scheduled, when the dispatcher looked, gets it back when
// that write fails; the dispatcher, which left the step out of its look,
// is woken to claim the step's ready task at once, the clock standing
// still.
func TestRoomGivenBackWakesTheDispatcher(t *testing.T) {
	t.Parallel()
	fake, db := fakeStore(t)
	st := &failsFirstSchedule{countsWakes: countsWakes{Store: db}, held: make(chan struct{}), release: make(chan struct{})}
	one := reprise.NewStep("one", func(context.Context, int) (int, error) { return 1, nil }, reprise.WithConcurrency(1))
	wf := reprise.NewWorkflow("one", func(ctx context.Context, n int) (int, error) { return reprise.Step(ctx, one, n) })
	e := reprisetest.Run(t, reprise.Config{Store: st, Clock: fake, PollInterval: time.Hour}, one, wf)
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(st.release) }) })
	ctx := t.Context()

	// A run's step is leased as it is scheduled: the step's one slot is
	// reserved for it while the write is held.
	// (An eager start holds StartRun; a start before the engine runs
	// creates the run for a claim, whose advance is held.)
	started := make(chan struct{})
	go func() {
		defer close(started)
		_, _ = wf.Start(ctx, e, 0) // fails, or its run's first advance does
	}()
	<-st.held
	// Another process schedules a step of the same name: ready, and the
	// dispatcher, told, looks while the step has no room.
	other, _, err := db.RunCreate(ctx, &store.RunCreateParams{ID: "other", Workflow: "elsewhere", Owner: "elsewhere", LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.RunAdvance(ctx, &store.RunAdvanceParams{RunID: "other", Token: other.Token,
		Steps: []store.StepSpec{{Position: 1, Name: "one", Input: []byte("0"), IdempotencyKey: "other-1"}}}); err != nil {
		t.Fatal(err)
	}
	looked := st.wakes.Load()
	e.Notify(store.Notice{Kind: store.NoticeTaskReady})
	waitFor(t, func() bool { return st.wakes.Load() > looked })
	// The create fails: the slot is free again.
	release.Do(func() { close(st.release) })
	<-started
	waitFor(t, func() bool {
		events, err := db.HistoryList(ctx, &store.HistoryListParams{RunID: "other"})
		return err == nil && countEvents(events, store.EventAttemptStarted) == 1
	})
}
