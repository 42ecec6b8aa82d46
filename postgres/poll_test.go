package postgres_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"reprise"
	"reprise/postgres"
)

// readCounting is the store, counting history reads.
type readCounting struct {
	*postgres.Store
	reads atomic.Int32
}

func (s *readCounting) HistoryList(ctx context.Context, p *reprise.HistoryListParams) ([]reprise.Event, error) {
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
	store := &readCounting{Store: openOn(t, dsn, &postgres.Options{Schema: schema})}
	running, release := make(chan struct{}), make(chan struct{})
	hold := reprise.NewStep("hold", func(ctx context.Context, _ int) (int, error) {
		close(running)
		<-release
		return 1, nil
	})
	wf := reprise.NewWorkflow("held", func(ctx context.Context, n int) (int, error) { return reprise.Step(ctx, hold, n) })
	// Poll rounds every 20 ms, and a run's first poll 50 ms after its
	// last news (a third of RunLeaseTTL).
	e, err := reprise.New(reprise.Config{
		Store: store, PollInterval: 20 * time.Millisecond, RunLeaseTTL: 150 * time.Millisecond, LeaseTTL: 150 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(wf, hold); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	var closed atomic.Bool
	defer func() {
		if closed.CompareAndSwap(false, true) {
			close(release)
		}
		cancel()
		<-done
	}()

	// The listener, once connected, has every resident run read its
	// history (notices may have been lost before): let it connect first.
	time.Sleep(300 * time.Millisecond)
	h, err := wf.Start(ctx, e, 0)
	if err != nil {
		t.Fatal(err)
	}
	<-running
	before := store.reads.Load()
	time.Sleep(500 * time.Millisecond)
	if n := store.reads.Load() - before; n != 0 {
		t.Errorf("%d history reads while the run's attempt ran in its engine, want 0", n)
	}
	closed.Store(true)
	close(release)
	if got, err := h.Result(ctx); err != nil || got != 1 {
		t.Fatalf("result %d, %v", got, err)
	}
}
