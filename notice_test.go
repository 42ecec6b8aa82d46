package reprise_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"reprise"
	"reprise/reprisetest"
	"reprise/store"
)

// readCounting is a real store that counts history reads.
type readCounting struct {
	store.Store
	reads atomic.Int32
}

func (s *readCounting) HistoryList(ctx context.Context, p *store.HistoryListParams) ([]reprise.Event, error) {
	s.reads.Add(1)
	return s.Store.HistoryList(ctx, p)
}

// TestNoticeOfKnownEventsReadsNothing: a notice of an outcome whose events
// the engine already has (it made the change itself, and the store's
// answer carried them) costs no history read; one beyond them, or one
// that does not say how far it goes, makes the run read its history.
func TestNoticeOfKnownEventsReadsNothing(t *testing.T) {
	t.Parallel()
	counted := &readCounting{Store: tempStore(t)}
	release := make(chan struct{})
	hold := reprise.NewStep("hold", func(ctx context.Context, _ int) (int, error) {
		<-release
		return 1, nil
	})
	wf := reprise.NewWorkflow("held", func(ctx context.Context, n int) (int, error) {
		return reprise.Step(ctx, hold, n)
	})
	obs := &idleness{}
	e := reprisetest.Run(t, reprise.Config{Store: counted, WorkerID: "engine-a", Observer: obs}, wf, hold)
	t.Cleanup(func() { close(release) })

	h, err := wf.Start(t.Context(), e, 1)
	if err != nil {
		t.Fatal(err)
	}
	// The run waits for its step, resident, having read nothing.
	var last int64
	waitFor(t, func() bool {
		events, err := counted.Store.HistoryList(t.Context(), &store.HistoryListParams{RunID: h.ID})
		if err != nil {
			t.Fatal(err)
		}
		last = events[len(events)-1].Seq
		return events[len(events)-1].Type == store.EventAttemptStarted
	})
	idle := obs.idle
	waitFor(t, idle)
	base := counted.reads.Load()

	outcome := store.Notice{Kind: store.NoticeOutcome, RunID: h.ID, Owner: "engine-a"}
	known := outcome
	known.Seq = last
	// Notify decides at once whether the run must read its history, and a
	// wake-up it sends counts as busy until the run has acted on it: once
	// the engine is idle, a read it caused is done.
	e.Notify(known)
	waitFor(t, idle)
	if n := counted.reads.Load() - base; n != 0 {
		t.Fatalf("a notice of events the run has cost %d history reads, want 0", n)
	}

	for _, n := range []store.Notice{outcome, {Kind: store.NoticeOutcome, RunID: h.ID, Owner: "engine-a", Seq: last + 1}} {
		before := counted.reads.Load()
		e.Notify(n)
		waitFor(t, func() bool { return counted.reads.Load() > before })
	}
}

// TestCancelElsewhereStopsAttemptsHere: a run cancelled by another process
// (the store's RunCancel, then its notice to the run's owner) stops its
// attempt in step code here at once, not at the attempt's next heartbeat,
// and leaves this engine.
func TestCancelElsewhereStopsAttemptsHere(t *testing.T) {
	t.Parallel()
	st := tempStore(t)
	running, stopped := make(chan struct{}), make(chan struct{})
	hang := reprise.NewStep("hang", func(ctx context.Context, _ int) (int, error) {
		close(running)
		<-ctx.Done()
		close(stopped)
		return 0, ctx.Err()
	})
	wf := reprise.NewWorkflow("hangs", func(ctx context.Context, n int) (int, error) {
		return reprise.Step(ctx, hang, n)
	})
	e := reprisetest.Run(t, reprise.Config{Store: st, WorkerID: "engine-a", LeaseTTL: time.Hour}, wf, hang)
	h, err := wf.Start(t.Context(), e, 1)
	if err != nil {
		t.Fatal(err)
	}
	<-running
	if _, err := st.RunCancel(t.Context(), &store.RunCancelParams{ID: h.ID, Reason: "elsewhere"}); err != nil {
		t.Fatal(err)
	}
	e.Notify(store.Notice{Kind: store.NoticeOutcome, RunID: h.ID, Owner: "engine-a"})
	<-stopped
	waitFor(t, func() bool { return e.ResidentRuns() == 0 })
}
