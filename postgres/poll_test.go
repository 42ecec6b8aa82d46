package postgres_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"reprise"
	"reprise/clock"
	"reprise/postgres"
	"reprise/reprisetest"
	"reprise/store"
)

// readCounting is the store, counting history reads. listening is closed
// once its notice listener listens.
type readCounting struct {
	*postgres.Store
	reads     atomic.Int32
	once      sync.Once
	listening chan struct{}
}

func countReads(s *postgres.Store) *readCounting {
	return &readCounting{Store: s, listening: make(chan struct{})}
}

func (s *readCounting) Listen(ctx context.Context, fn func(store.Notice)) error {
	return s.Store.Listen(ctx, func(n store.Notice) {
		fn(n)
		if n.Kind == store.NoticeResync { // it listens, and fn has done with the resync
			s.once.Do(func() { close(s.listening) })
		}
	})
}

func (s *readCounting) HistoryList(ctx context.Context, p *store.HistoryListParams) ([]store.Event, error) {
	s.reads.Add(1)
	return s.Store.HistoryList(ctx, p)
}

// An idleWatch is the Observer of an engine on a fake clock: it keeps
// whether the engine is busy, and counts the times it said so or said it
// was idle.
type idleWatch struct {
	reprise.NopObserver

	mu    sync.Mutex
	busy  bool
	turns int64
}

func (w *idleWatch) EngineBusy() {
	w.mu.Lock()
	w.busy = true
	w.turns++
	w.mu.Unlock()
}

func (w *idleWatch) EngineIdle(int) {
	w.mu.Lock()
	w.busy = false
	w.turns++
	w.mu.Unlock()
}

// settle waits, without moving the clock, until the engine has done what
// it does at the clock's time: it said it was idle, took every timer that
// fired, and said nothing more over 20 looks in a row (a goroutine that
// has just taken a timer's tick is not busy yet). It fails the test after
// a minute of real time.
func (w *idleWatch) settle(t *testing.T, c *clock.Fake) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(500 * time.Microsecond)
	defer tick.Stop()
	last := int64(-1)
	for still := 0; still < 20; {
		w.mu.Lock()
		busy, turns := w.busy, w.turns
		w.mu.Unlock()
		if !busy && c.Pending() == 0 && turns == last {
			still++
		} else {
			still = 0
		}
		last = turns
		if time.Now().After(deadline) {
			t.Fatal("the engine was not idle within a minute of real time")
		}
		<-tick.C
	}
}

// TestRunWithLocalAttemptDoesNotPoll: a resident run waiting for a step
// whose attempt runs in its own engine reads no history, however many
// poll rounds pass: that outcome comes to it without a notice. Polls are
// for outcomes other processes record. The engine and the store run on a
// fake clock, moved from one timer to the next through the rounds once
// the engine has done with each.
func TestRunWithLocalAttemptDoesNotPoll(t *testing.T) {
	t.Parallel()
	dsn, schema := testSchema(t)
	c := clock.NewFake(time.Now())
	st := countReads(openOn(t, dsn, &postgres.Options{Schema: schema, Now: c.Now}))
	watch := &idleWatch{}
	running, release := make(chan struct{}), make(chan struct{})
	var started sync.Once
	hold := reprise.NewStep("hold", func(ctx context.Context, _ int) (int, error) {
		started.Do(func() { close(running) })
		<-release
		return 1, nil
	})
	wf := reprise.NewWorkflow("held", func(ctx context.Context, n int) (int, error) { return reprise.Step(ctx, hold, n) })
	// Poll rounds every 20 ms, and a run's first poll 200 ms after its
	// last news (a third of RunLeaseTTL), the next 400 ms after that, then
	// every 600 ms.
	e := reprisetest.Run(t, reprise.Config{Store: st, Clock: c, Observer: watch,
		PollInterval: 20 * time.Millisecond, RunLeaseTTL: 600 * time.Millisecond}, wf, hold)
	var released sync.Once
	letGo := func() { released.Do(func() { close(release) }) }
	t.Cleanup(letGo) // before the engine stops
	ctx := t.Context()

	// The listener, once connected, has every resident run read its
	// history (notices may have been lost before): let it connect first.
	<-st.listening
	h, err := wf.Start(ctx, e, 0)
	if err != nil {
		t.Fatal(err)
	}
	<-running
	before := st.reads.Load()
	for end := c.Now().Add(1250 * time.Millisecond); c.Now().Before(end); { // three of the run's polls
		watch.settle(t, c)
		next, ok := c.Next()
		if !ok {
			t.Fatal("the engine set no timer for its next poll round")
		}
		c.Set(next)
	}
	watch.settle(t, c)
	if n := st.reads.Load() - before; n != 0 {
		t.Errorf("%d history reads while the run's attempt ran in its engine, want 0", n)
	}
	letGo()
	if got, err := h.Result(ctx); err != nil || got != 1 {
		t.Fatalf("result %d, %v", got, err)
	}
}

// TestClaimedFreshRunReadsNoHistory: RunClaim says how far a run's history
// goes, and an engine that claims a run whose history is RunStarted alone
// starts it without reading it; a run with more is read.
func TestClaimedFreshRunReadsNoHistory(t *testing.T) {
	t.Parallel()
	dsn, schema := testSchema(t)
	st := countReads(openOn(t, dsn, &postgres.Options{Schema: schema}))
	ctx := t.Context()
	for _, id := range []string{"fresh", "signalled"} {
		if _, _, err := st.RunCreate(ctx, &store.RunCreateParams{ID: id, Workflow: "probe"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.SignalSend(ctx, &store.SignalSendParams{RunID: "signalled", Name: "early"}); err != nil {
		t.Fatal(err)
	}
	leases, err := st.RunClaim(ctx, &store.RunClaimParams{Owner: "probe", Limit: 5, LeaseTTL: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	seqs := map[string]int64{}
	for _, l := range leases {
		seqs[l.Run.ID] = l.LastSeq
	}
	if seqs["fresh"] != 1 || seqs["signalled"] != 2 {
		t.Fatalf("claimed with last seqs %v, want fresh 1, signalled 2", seqs)
	}

	step := reprise.NewStep("one", func(context.Context, int) (int, error) { return 1, nil })
	wf := reprise.NewWorkflow("counted", func(ctx context.Context, n int) (int, error) { return reprise.Step(ctx, step, n) })
	e := reprisetest.Run(t, reprise.Config{Store: st, PollInterval: 20 * time.Millisecond}, wf, step)
	// The listener, once connected, has every resident run read its
	// history: let it connect before there are any.
	<-st.listening
	for _, id := range []string{"c1", "c2", "c3"} {
		if _, _, err := st.RunCreate(ctx, &store.RunCreateParams{ID: id, Workflow: "counted", Input: []byte("0")}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"c1", "c2", "c3"} {
		if run, err := e.WaitRun(ctx, id); err != nil || run.Status != store.RunCompleted {
			t.Fatalf("run %s: %+v, %v", id, run, err)
		}
	}
	if n := st.reads.Load(); n != 0 {
		t.Errorf("%d history reads for runs claimed with RunStarted alone, want 0", n)
	}
}
