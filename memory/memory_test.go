package memory_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"reprise/memory"
	"reprise/store"
	"reprise/storetest"
)

func TestStore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
		return open(t, now)
	})
}

func TestEngines(t *testing.T) {
	t.Parallel()
	storetest.Engines(t, func(t *testing.T) (store.Store, store.Store) {
		first := memory.New(memory.Options{})
		second := first.Open()
		t.Cleanup(func() { second.Close() })
		return first, second
	})
}

// open opens an empty store that t closes.
func open(t *testing.T, now func() time.Time) *memory.Store {
	t.Helper()
	s := memory.New(memory.Options{Now: now})
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// TestCopiesInAndOut: what a caller gave the store, and what the store
// gave it, the caller may change without changing the store.
func TestCopiesInAndOut(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	s := open(t, func() time.Time { return at })
	ctx := t.Context()

	input := json.RawMessage(`{"n":1}`)
	lease, _, err := s.RunCreate(ctx, &store.RunCreateParams{
		ID: "run-1", Workflow: "order", Input: input, Owner: "engine-1", LeaseTTL: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	stepInput := json.RawMessage(`{"step":1}`)
	steps := []store.StepSpec{{Position: 1, Name: "charge", Input: stepInput, IdempotencyKey: "k"}}
	if _, err := s.RunAdvance(ctx, &store.RunAdvanceParams{RunID: "run-1", Token: lease.Token, Steps: steps}); err != nil {
		t.Fatal(err)
	}
	run, _ := s.RunGet(ctx, "run-1")
	history, _ := s.HistoryList(ctx, &store.HistoryListParams{RunID: "run-1"})
	tasks, _ := s.TaskClaim(ctx, &store.TaskClaimParams{
		Owner: "worker-1", Steps: []store.StepQuota{{Name: "charge", Limit: 1}}, LeaseTTL: time.Minute,
	})
	if len(tasks) != 1 {
		t.Fatalf("claimed %d tasks, want 1", len(tasks))
	}
	errInfo := &store.ErrorInfo{Type: "Declined"}
	if _, err := s.TaskFail(ctx, &store.TaskFailParams{
		TaskID: tasks[0].ID, Token: tasks[0].Token, Error: *errInfo, Retry: true,
	}); err != nil {
		t.Fatal(err)
	}
	wantRun, _ := s.RunGet(ctx, "run-1")
	wantHistory, _ := s.HistoryList(ctx, &store.HistoryListParams{RunID: "run-1"})
	wantTask, _ := s.TaskGet(ctx, tasks[0].ID)

	// Scribble over every byte the caller holds.
	for _, b := range [][]byte{input, stepInput, lease.Run.Input, run.Input, history[0].Input, history[1].Input, tasks[0].Input} {
		for i := range b {
			b[i] = 'x'
		}
	}
	errInfo.Type, history[0].Seq, tasks[0].Attempt = "changed", 99, 99

	gotRun, _ := s.RunGet(ctx, "run-1")
	gotHistory, _ := s.HistoryList(ctx, &store.HistoryListParams{RunID: "run-1"})
	gotTask, _ := s.TaskGet(ctx, tasks[0].ID)
	if !reflect.DeepEqual(gotRun, wantRun) || !reflect.DeepEqual(gotHistory, wantHistory) || !reflect.DeepEqual(gotTask, wantTask) {
		t.Fatalf("the store changed with its caller's copies:\nrun %+v\nwant %+v\nhistory %+v\nwant %+v\ntask %+v\nwant %+v",
			gotRun, wantRun, gotHistory, wantHistory, gotTask, wantTask)
	}
}

// TestRefusesWhatItCannotKeep: a document that is not JSON, and a call
// after Close, fail and change nothing.
func TestRefusesWhatItCannotKeep(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Options{})
	ctx := t.Context()
	_, _, err := s.RunCreate(ctx, &store.RunCreateParams{ID: "run-1", Workflow: "order", Input: json.RawMessage(`{"n":`)})
	if err == nil {
		t.Fatal("RunCreate with an input that is not JSON: no error")
	}
	if _, err := s.RunGet(ctx, "run-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("RunGet after a refused create: %v, want ErrNotFound", err)
	}

	other := s.Open()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.RunCreate(ctx, &store.RunCreateParams{ID: "run-1", Workflow: "order"}); err == nil {
		t.Fatal("RunCreate after Close: no error")
	}
	if _, err := other.RunGet(ctx, "run-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("RunGet on another store after a create refused: %v, want ErrNotFound", err)
	}
}
