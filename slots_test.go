package reprise_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"reprise"
	"reprise/sqlite"
)

// slowFails is a real store whose first TaskFail waits for release.
type slowFails struct {
	reprise.Store
	once    sync.Once
	writing chan struct{} // closed when the first TaskFail arrives
	release chan struct{}
}

func (s *slowFails) TaskFail(ctx context.Context, p *reprise.TaskFailParams) (*reprise.Outcome, error) {
	first := false
	s.once.Do(func() { first = true })
	if first {
		close(s.writing)
		<-s.release
	}
	return s.Store.TaskFail(ctx, p)
}

// TestSlotIsFreeWhileOutcomeIsWritten: with one slot, a step runs while
// another's failure is being written, and the retry leased by that write
// still runs once it is recorded.
func TestSlotIsFreeWhileOutcomeIsWritten(t *testing.T) {
	t.Parallel()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "slots.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	store := &slowFails{Store: db, writing: make(chan struct{}), release: make(chan struct{})}
	flaky := failsFirst("flaky", "second time", "[retry: 3, backoff: 0s]")
	quick := reprise.NewStep("quick", func(context.Context, int) (string, error) { return "quick", nil })
	wfFlaky := reprise.NewWorkflow("flaky", func(ctx context.Context, n int) (string, error) { return reprise.Step(ctx, flaky, n) })
	wfQuick := reprise.NewWorkflow("quick", func(ctx context.Context, n int) (string, error) { return reprise.Step(ctx, quick, n) })
	e, err := reprise.New(reprise.Config{Store: store, MaxConcurrentSteps: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(flaky, quick, wfFlaky, wfQuick); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	var release sync.Once
	defer func() { release.Do(func() { close(store.release) }); cancel(); <-done }()

	hf, err := wfFlaky.Start(ctx, e, 0)
	if err != nil {
		t.Fatal(err)
	}
	<-store.writing
	hq, err := wfQuick.Start(ctx, e, 0)
	if err != nil {
		t.Fatal(err)
	}
	wait, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	if out, err := hq.Result(wait); err != nil || out != "quick" {
		t.Fatalf("quick run: %q, %v while the other step's failure was written; want its result", out, err)
	}
	release.Do(func() { close(store.release) })
	if out, err := hf.Result(wait); err != nil || out != "second time" {
		t.Fatalf("flaky run: %q, %v", out, err)
	}
	var attempts []int
	for _, ev := range history(t, db, hf.ID) {
		if ev.Type == reprise.EventAttemptStarted {
			attempts = append(attempts, ev.Attempt)
		}
	}
	if len(attempts) != 2 || attempts[1] != 2 {
		t.Errorf("attempts started %v, want [1 2]", attempts)
	}
}

func history(t *testing.T, s reprise.Store, id string) []reprise.Event {
	t.Helper()
	evs, err := s.HistoryList(context.Background(), &reprise.HistoryListParams{RunID: id})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}
