package postgres_test

import (
	"context"
	"reprise/store"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"reprise"
	"reprise/postgres"
	"reprise/reprisetest"
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

// TestRunWithLocalAttemptDoesNotPoll: a resident run waiting for a step
// whose attempt runs in its own engine reads no history, however many
// poll rounds pass: that outcome comes to it without a notice. Polls are
// for outcomes other processes record.
func TestRunWithLocalAttemptDoesNotPoll(t *testing.T) {
	t.Parallel()
	dsn, schema := testSchema(t)
	st := countReads(openOn(t, dsn, &postgres.Options{Schema: schema}))
	running, release := make(chan struct{}), make(chan struct{})
	var started sync.Once
	hold := reprise.NewStep("hold", func(ctx context.Context, _ int) (int, error) {
		started.Do(func() { close(running) })
		<-release
		return 1, nil
	})
	wf := reprise.NewWorkflow("held", func(ctx context.Context, n int) (int, error) { return reprise.Step(ctx, hold, n) })
	// Poll rounds every 20 ms, and a run's first poll 200 ms after its
	// last news (a third of RunLeaseTTL), the next 400 ms after that.
	e := reprisetest.Run(t, reprise.Config{Store: st, PollInterval: 20 * time.Millisecond, RunLeaseTTL: 600 * time.Millisecond}, wf, hold)
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
	time.Sleep(time.Second)
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
		if run, err := e.Wait(ctx, id); err != nil || run.Status != store.RunCompleted {
			t.Fatalf("run %s: %+v, %v", id, run, err)
		}
	}
	if n := st.reads.Load(); n != 0 {
		t.Errorf("%d history reads for runs claimed with RunStarted alone, want 0", n)
	}
}
