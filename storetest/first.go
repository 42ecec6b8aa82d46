package storetest

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"reprise/store"
)

// createFirst creates a run leased to engine with a first advance.
func (f *fixture) createFirst(id string, first store.RunAdvanceParams) (store.RunLease, bool) {
	f.t.Helper()
	lease, created, err := f.store.RunCreate(f.t.Context(), &store.RunCreateParams{
		ID: id, Workflow: "order", Input: json.RawMessage(`{"n":1}`),
		Owner: engine, LeaseTTL: minute, First: &first,
	})
	if err != nil {
		f.t.Fatalf("RunCreate(%s) with a first advance: %v", id, err)
	}
	return lease, created
}

func testRunCreateFirst(t *testing.T, open Open) {
	firstAdvance := func() store.RunAdvanceParams {
		return store.RunAdvanceParams{
			LeaseOwner: engine, LeaseTTL: minute,
			Steps:   []store.StepSpec{leased(newStep(1, "charge")), newStep(2, "ship")},
			Timers:  []store.TimerSpec{{Position: 3, Delay: time.Hour}},
			Markers: []store.MarkerSpec{{Position: 4, Name: "change", Version: 2}},
		}
	}

	t.Run("RecordsWhatCreateThenAdvanceWould", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		// The same run, made the two ways.
		twoStep, _, err := f.store.RunCreate(t.Context(), &store.RunCreateParams{
			ID: "two", Workflow: "order", Input: json.RawMessage(`{"n":1}`), Owner: engine, LeaseTTL: minute,
		})
		if err != nil {
			t.Fatal(err)
		}
		want := f.advanced(twoStep, firstAdvance())
		lease, created := f.createFirst("one", firstAdvance())
		if !created || lease.Token == 0 || lease.Advanced == nil {
			t.Fatalf("created=%v token=%d advanced=%v, want a new leased run and what it advanced", created, lease.Token, lease.Advanced)
		}

		requireEvents(t, f.history("one"), f.history("two"))
		requireEvents(t, lease.Advanced.Events, want.Events)
		if len(lease.Advanced.Tasks) != 1 || len(want.Tasks) != 1 {
			t.Fatalf("leased tasks: %d, want 1", len(lease.Advanced.Tasks))
		}
		got, exp := normTask(lease.Advanced.Tasks[0]), normTask(want.Tasks[0])
		got.ID, got.RunID, exp.ID, exp.RunID = 0, "", 0, ""
		if !reflect.DeepEqual(got, exp) {
			t.Fatalf("leased task:\n got %+v\nwant %+v", got, exp)
		}
		run := f.get("one")
		if run.Status != store.RunRunning || lease.Run.Status != store.RunRunning {
			t.Fatalf("status: stored %s, returned %s; want running", run.Status, lease.Run.Status)
		}

		// The leased attempt completes with its token, the other step is
		// ready for a claim, and the creator's token advances the run.
		f.complete(lease.Advanced.Tasks[0])
		f.claimOne("ship")
		f.advance(lease, store.RunAdvanceParams{Finish: &store.RunFinish{Status: store.RunCompleted}})
	})

	t.Run("FirstThatFinishes", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease, _ := f.createFirst("run-1", store.RunAdvanceParams{
			Finish: &store.RunFinish{Status: store.RunCompleted, Output: json.RawMessage(`"ok"`)},
		})
		requireEvents(t, f.history("run-1"), []store.Event{
			{Seq: 1, Type: store.EventRunStarted, At: start, Execution: 1, Workflow: "order", Input: json.RawMessage(`{"n":1}`)},
			{Seq: 2, Type: store.EventRunCompleted, At: start, Execution: 1, Output: json.RawMessage(`"ok"`)},
		})
		stored := f.get("run-1")
		if stored.Status != store.RunCompleted || !equalRun(normRun(lease.Run), normRun(stored)) {
			t.Fatalf("returned run %+v, stored %+v; want the same, completed", lease.Run, stored)
		}
		if got := f.runClaim(engine2, 10); len(got) != 0 {
			t.Fatalf("RunClaim took a finished run: %d", len(got))
		}
	})

	t.Run("FirstThatContinuesAsNew", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease, _ := f.createFirst("run-1", store.RunAdvanceParams{
			Finish: &store.RunFinish{ContinueAsNew: true, Input: json.RawMessage(`{"n":2}`)},
		})
		got := f.history("run-1")
		if len(got) != 3 || got[1].Type != store.EventRunContinuedAsNew || got[2].Type != store.EventRunStarted || got[2].Execution != 2 {
			t.Fatalf("history %s, want RunStarted, RunContinuedAsNew, RunStarted of execution 2", dump(got))
		}
		stored := f.get("run-1")
		if stored.Execution != 2 || stored.Status != store.RunRunning || !equalRun(normRun(lease.Run), normRun(stored)) {
			t.Fatalf("returned run %+v, stored %+v; want the same, running in execution 2", lease.Run, stored)
		}
		// Still leased to its creator, with the same token.
		f.advance(lease, store.RunAdvanceParams{Finish: &store.RunFinish{Status: store.RunCompleted}})
	})

	t.Run("ExistingIDChangesNothing", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		existing := f.create("run-1")
		before := f.history("run-1")
		lease, created := f.createFirst("run-1", firstAdvance())
		if created || lease.Token != 0 || lease.Advanced != nil {
			t.Fatalf("created=%v token=%d advanced=%v for an existing id", created, lease.Token, lease.Advanced)
		}
		requireEvents(t, f.history("run-1"), before)
		f.claimNone("ship")
		f.advance(existing, store.RunAdvanceParams{})
	})

	t.Run("NeedsOwner", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		_, _, err := f.store.RunCreate(t.Context(), &store.RunCreateParams{
			ID: "run-1", Workflow: "order", First: &store.RunAdvanceParams{},
		})
		if err == nil {
			t.Fatal("RunCreate with a first advance and no owner: no error")
		}
		_, err = f.store.RunGet(t.Context(), "run-1")
		requireErr(t, err, store.ErrNotFound)
	})
}
