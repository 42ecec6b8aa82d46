package sqlite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"reprise/store"
)

func openTest(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "reprise.db"), &Options{Synchronous: "OFF"})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// holdLeader makes a write that leads a batch and blocks in it until
// release is called, so that the calls made meanwhile queue up and run
// together in the next batch. wait returns once n calls are queued.
func holdLeader(t *testing.T, s *Store) (wait func(n int), release func()) {
	t.Helper()
	entered, held := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.write(t.Context(), func(*txn) error {
			close(entered)
			<-held
			return nil
		})
	}()
	<-entered
	wait = func(n int) {
		for {
			s.commit.mu.Lock()
			queued := len(s.commit.queue)
			s.commit.mu.Unlock()
			if queued >= n {
				return
			}
			runtime.Gosched()
		}
	}
	release = func() {
		close(held)
		if err := <-done; err != nil {
			t.Errorf("holding write: %v", err)
		}
	}
	return wait, release
}

func TestCommitOneBadCallKeepsTheOthers(t *testing.T) {
	t.Parallel()
	s := openTest(t)
	ctx := t.Context()
	lease, _, err := s.RunCreate(ctx, &store.RunCreateParams{ID: "bad", Workflow: "w", Owner: "e", LeaseTTL: 1e12})
	if err != nil {
		t.Fatal(err)
	}

	wait, release := holdLeader(t, s)
	const good = 20
	var wg sync.WaitGroup
	errs := make([]error, good)
	for i := range good {
		wg.Go(func() {
			_, _, errs[i] = s.RunCreate(ctx, &store.RunCreateParams{
				ID: fmt.Sprintf("good-%d", i), Workflow: "w", Input: json.RawMessage(`{}`),
			})
		})
	}
	// Two steps at one position: the events go in, then the second task
	// breaks a unique index, after the call has written.
	var badErr error
	wg.Go(func() {
		step := store.StepSpec{Position: 1, Name: "s", IdempotencyKey: "k"}
		_, badErr = s.RunAdvance(ctx, &store.RunAdvanceParams{
			RunID: "bad", Token: lease.Token, Steps: []store.StepSpec{step, step},
		})
	})
	wait(good + 1)
	release()
	wg.Wait()

	if badErr == nil || errors.Is(badErr, store.ErrLeaseLost) {
		t.Fatalf("bad RunAdvance: err = %v, want a constraint error", badErr)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("good call %d: %v", i, err)
		}
		if _, err := s.RunGet(ctx, fmt.Sprintf("good-%d", i)); err != nil {
			t.Fatalf("run of good call %d: %v", i, err)
		}
	}
	history, err := s.HistoryList(ctx, &store.HistoryListParams{RunID: "bad"})
	if err != nil {
		t.Fatal(err)
	}
	if len(history) != 1 {
		t.Fatalf("bad run's history has %d events, want only RunStarted: the failed call's writes must be undone", len(history))
	}
	if run, _ := s.RunGet(ctx, "bad"); run.Status != store.RunRunning || run.Execution != 1 {
		t.Fatalf("bad run is %s in execution %d, want running in 1, as created", run.Status, run.Execution)
	}
}

func TestCommitSentinelErrorsShareTheBatch(t *testing.T) {
	t.Parallel()
	s := openTest(t)
	ctx := t.Context()

	wait, release := holdLeader(t, s)
	const calls = 10
	var runs atomic.Int32
	var wg sync.WaitGroup
	errs := make([]error, calls)
	for i := range calls {
		wg.Go(func() {
			errs[i] = s.write(ctx, func(tx *txn) error {
				runs.Add(1)
				if i%2 == 1 {
					return store.ErrLeaseLost
				}
				_, err := tx.exec(`INSERT INTO timers (run_id, execution, position, fire_at) VALUES (?, 1, ?, 0)`, "r", i)
				return err
			})
		})
	}
	wait(calls)
	release()
	wg.Wait()

	if n := runs.Load(); n != calls {
		t.Fatalf("calls ran %d times, want %d: a sentinel error must not make the batch run again", n, calls)
	}
	for i, err := range errs {
		if want := i%2 == 1; errors.Is(err, store.ErrLeaseLost) != want || (!want && err != nil) {
			t.Fatalf("call %d: err = %v", i, err)
		}
	}
	var count int
	err := s.read(ctx, func(tx *txn) error { return tx.queryRow(`SELECT count(*) FROM timers`).Scan(&count) })
	if err != nil || count != calls/2 {
		t.Fatalf("timers = %d (%v), want %d", count, err, calls/2)
	}
}

func TestCommitCancelledWhileQueuedNeverRuns(t *testing.T) {
	t.Parallel()
	s := openTest(t)

	wait, release := holdLeader(t, s)
	ctx, cancel := context.WithCancelCause(t.Context())
	stop := errors.New("caller gave up")
	var ran atomic.Bool
	done := make(chan error, 1)
	go func() {
		done <- s.write(ctx, func(*txn) error { ran.Store(true); return nil })
	}()
	wait(1)
	cancel(stop)
	if err := <-done; !errors.Is(err, stop) {
		t.Fatalf("err = %v, want the context's cause", err)
	}
	release()
	// A later write still works, and the cancelled one never ran.
	if err := s.write(t.Context(), func(*txn) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if ran.Load() {
		t.Fatal("a call cancelled while queued ran")
	}
}

func TestCommitAfterCloseFails(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), ":memory:", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = s.RunGet(t.Context(), "x")
	if !errors.Is(err, errClosed) {
		t.Fatalf("err = %v, want errClosed", err)
	}
}
