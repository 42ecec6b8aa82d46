package storetest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"reprise/store"
)

func testRunCreate(t *testing.T, open Open) {
	t.Run("CreatesPendingRunAndAppendsRunStarted", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease, created, err := f.store.RunCreate(t.Context(), &store.RunCreateParams{
			ID: "run-1", Workflow: "order", Input: json.RawMessage(`{"n":1}`),
		})
		if err != nil || !created {
			t.Fatalf("RunCreate: created=%v err=%v", created, err)
		}
		if lease.Token != 0 {
			t.Fatalf("Token = %d without an owner, want 0", lease.Token)
		}
		want := store.Run{
			ID: "run-1", Workflow: "order", Status: store.RunPending,
			Input: json.RawMessage(`{"n":1}`), Execution: 1, CreatedAt: start, UpdatedAt: start,
		}
		if got := normRun(lease.Run); !equalRun(got, want) {
			t.Fatalf("returned run = %+v, want %+v", got, want)
		}
		if got := normRun(f.get("run-1")); !equalRun(got, want) {
			t.Fatalf("RunGet = %+v, want %+v", got, want)
		}
		requireEvents(t, f.history("run-1"), []store.Event{{
			Seq: 1, Type: store.EventRunStarted, At: start, Execution: 1,
			Workflow: "order", Input: json.RawMessage(`{"n":1}`),
		}})
	})

	t.Run("KeepsTraceParent", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		// The trace context goes with the run to every reader: the
		// creator, RunGet, RunList, and the engine that claims the run
		// after its creator died.
		const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		lease, _, err := f.store.RunCreate(t.Context(), &store.RunCreateParams{
			ID: "run-1", Workflow: "order", TraceParent: tp,
		})
		if err != nil {
			t.Fatalf("RunCreate: %v", err)
		}
		if lease.Run.TraceParent != tp {
			t.Fatalf("returned run's TraceParent = %q, want %q", lease.Run.TraceParent, tp)
		}
		if got := f.get("run-1").TraceParent; got != tp {
			t.Fatalf("RunGet: TraceParent = %q, want %q", got, tp)
		}
		runs, err := f.store.RunList(t.Context(), &store.RunListParams{})
		if err != nil || len(runs) != 1 || runs[0].TraceParent != tp {
			t.Fatalf("RunList = %v, %v; want one run with TraceParent %q", runs, err, tp)
		}
		claimed := f.runClaim(engine2, 10)
		if len(claimed) != 1 || claimed[0].Run.TraceParent != tp {
			t.Fatalf("RunClaim = %v, want run-1 with TraceParent %q", claimed, tp)
		}
		// A second start under the id keeps the first's.
		again, created, err := f.store.RunCreate(t.Context(), &store.RunCreateParams{
			ID: "run-1", Workflow: "order", TraceParent: "00-11111111111111111111111111111111-2222222222222222-01",
		})
		if err != nil || created || again.Run.TraceParent != tp {
			t.Fatalf("RunCreate again: created=%v err=%v TraceParent=%q, want the first's %q", created, err, again.Run.TraceParent, tp)
		}
		// A run started without one has none.
		if got := f.create("run-2").Run.TraceParent; got != "" {
			t.Fatalf("run created without a trace context: TraceParent = %q, want empty", got)
		}
	})

	t.Run("WithOwnerLeasesRun", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease := f.create("run-1")
		if lease.Token == 0 {
			t.Fatal("Token = 0 for a run created with an owner")
		}
		if lease.Run.Status != store.RunRunning || f.get("run-1").Status != store.RunRunning {
			t.Fatalf("run created with an owner is %s, stored %s; want running", lease.Run.Status, f.get("run-1").Status)
		}
		f.clock.Advance(minute - time.Millisecond)
		if got := f.runClaim(engine2, 10); len(got) != 0 {
			t.Fatalf("RunClaim took a leased run: %d", len(got))
		}
		// The creator's token is good.
		f.advance(lease, store.RunAdvanceParams{})
	})

	t.Run("ExistingIDReturnsExistingRunAndChangesNothing", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		first := f.create("run-1")
		f.clock.Advance(time.Second)
		lease, created, err := f.store.RunCreate(t.Context(), &store.RunCreateParams{
			ID: "run-1", Workflow: "other", Input: json.RawMessage(`{"n":2}`),
			Owner: engine2, LeaseTTL: minute,
		})
		if err != nil {
			t.Fatalf("RunCreate again: %v", err)
		}
		if created {
			t.Fatal("created = true for an existing id")
		}
		if lease.Token != 0 {
			t.Fatalf("Token = %d for an existing run, want 0", lease.Token)
		}
		if got, want := normRun(lease.Run), normRun(first.Run); !equalRun(got, want) {
			t.Fatalf("returned run = %+v, want the existing %+v", got, want)
		}
		if n := len(f.history("run-1")); n != 1 {
			t.Fatalf("history has %d events, want 1", n)
		}
		// The first owner keeps its lease.
		f.advance(first, store.RunAdvanceParams{})
	})
}

func testRunGet(t *testing.T, open Open) {
	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)
		_, err := f.store.RunGet(t.Context(), "missing")
		requireErr(t, err, store.ErrNotFound)
	})

	t.Run("UpdatedAtIsLastEventTime", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", newStep(1, "charge"))
		f.clock.Advance(3 * time.Second)
		f.claimOne("charge")
		run := f.get("run-1")
		requireTime(t, "CreatedAt", run.CreatedAt, start)
		requireTime(t, "UpdatedAt", run.UpdatedAt, start.Add(3*time.Second))
		if run.Status != store.RunRunning {
			t.Fatalf("Status = %s, want running", run.Status)
		}
	})
}

func testRunList(t *testing.T, open Open) {
	// createAt creates runs with the ids, one millisecond apart unless
	// together.
	create := func(f *fixture, workflow string, ids ...string) {
		for _, id := range ids {
			_, _, err := f.store.RunCreate(f.t.Context(), &store.RunCreateParams{
				ID: id, Workflow: workflow, Input: json.RawMessage(`{}`),
			})
			if err != nil {
				f.t.Fatalf("RunCreate(%s): %v", id, err)
			}
		}
	}
	list := func(f *fixture, p store.RunListParams) []string {
		f.t.Helper()
		runs, err := f.store.RunList(f.t.Context(), &p)
		if err != nil {
			f.t.Fatalf("RunList: %v", err)
		}
		ids := make([]string, len(runs))
		for i, r := range runs {
			ids[i] = r.ID
		}
		return ids
	}
	requireIDs := func(t *testing.T, got []string, want ...string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Fatalf("ids = %v, want %v", got, want)
		}
	}

	t.Run("NewestFirstThenIDDescending", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		create(f, "order", "a")
		f.clock.Advance(time.Millisecond)
		create(f, "order", "c", "b") // same created time: id descending
		f.clock.Advance(time.Millisecond)
		create(f, "order", "0")
		requireIDs(t, list(f, store.RunListParams{}), "0", "c", "b", "a")
	})

	t.Run("ReturnsRunFields", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease := f.create("run-1")
		f.clock.Advance(time.Second)
		f.advance(lease, store.RunAdvanceParams{Finish: &store.RunFinish{
			Status: store.RunCompleted, Output: json.RawMessage(`{"ok":true}`),
		}})
		runs, err := f.store.RunList(t.Context(), &store.RunListParams{})
		if err != nil {
			t.Fatalf("RunList: %v", err)
		}
		if len(runs) != 1 || !equalRun(normRun(runs[0]), normRun(f.get("run-1"))) {
			t.Fatalf("RunList = %+v, want the run as RunGet returns it", runs)
		}
	})

	t.Run("FiltersStatusAndWorkflow", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		create(f, "order", "o1")
		f.clock.Advance(time.Millisecond)
		create(f, "refund", "r1")
		f.clock.Advance(time.Millisecond)
		lease := f.create("o2")
		f.advance(lease, store.RunAdvanceParams{})
		f.clock.Advance(time.Millisecond)
		lease = f.create("o3")
		f.advance(lease, store.RunAdvanceParams{Finish: &store.RunFinish{Status: store.RunCompleted}})

		requireIDs(t, list(f, store.RunListParams{Workflow: "order"}), "o3", "o2", "o1")
		requireIDs(t, list(f, store.RunListParams{Workflow: "refund"}), "r1")
		requireIDs(t, list(f, store.RunListParams{Status: store.RunPending}), "r1", "o1")
		requireIDs(t, list(f, store.RunListParams{Status: store.RunRunning}), "o2")
		requireIDs(t, list(f, store.RunListParams{Status: store.RunCompleted}), "o3")
		requireIDs(t, list(f, store.RunListParams{Status: store.RunPending, Workflow: "order"}), "o1")
		requireIDs(t, list(f, store.RunListParams{Workflow: "none"}))
	})

	t.Run("PagesWithBefore", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		create(f, "order", "a", "b")
		f.clock.Advance(time.Millisecond)
		create(f, "refund", "c", "d")
		f.clock.Advance(time.Millisecond)
		create(f, "order", "e")

		requireIDs(t, list(f, store.RunListParams{Limit: 2}), "e", "d")
		requireIDs(t, list(f, store.RunListParams{Limit: 2, Before: "d"}), "c", "b")
		requireIDs(t, list(f, store.RunListParams{Limit: 2, Before: "b"}), "a")
		requireIDs(t, list(f, store.RunListParams{Limit: 2, Before: "a"}))
		requireIDs(t, list(f, store.RunListParams{Workflow: "order", Before: "e"}), "b", "a")
	})

	t.Run("LimitDefaultsTo100", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		ids := make([]string, 105)
		for i := range ids {
			ids[i] = fmt.Sprintf("run-%03d", i)
		}
		create(f, "order", ids...)
		if got := list(f, store.RunListParams{}); len(got) != 100 {
			t.Fatalf("RunList without a limit returned %d runs, want 100", len(got))
		}
	})
}

func testRunAdvance(t *testing.T, open Open) {
	t.Run("AppendsStepsAndTimersInPositionOrder", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease := f.create("run-1")
		f.clock.Advance(time.Second)
		now := f.now()
		charge, ship := newStep(1, "charge"), withTimeout(newStep(3, "ship"), 10*time.Second)
		events := f.advance(lease, store.RunAdvanceParams{
			Steps:  []store.StepSpec{ship, charge}, // out of order on purpose
			Timers: []store.TimerSpec{{Position: 2, Delay: time.Hour}, {Position: 4, Delay: time.Second}},
		})
		want := []store.Event{
			stepScheduled(2, now, charge),
			{Seq: 3, Type: store.EventTimerScheduled, At: now, Execution: 1, Position: 2, Delay: time.Hour, FireAt: now.Add(time.Hour)},
			stepScheduled(4, now, ship),
			{Seq: 5, Type: store.EventTimerScheduled, At: now, Execution: 1, Position: 4, Delay: time.Second, FireAt: now.Add(time.Second)},
		}
		requireEvents(t, events, want)
		requireEvents(t, f.history("run-1")[1:], want)
		if run := f.get("run-1"); run.Status != store.RunRunning {
			t.Fatalf("Status = %s, want running", run.Status)
		}

		// The steps are ready tasks now.
		task := f.claimOne("ship")
		if task.Position != 3 || task.Timeout != 10*time.Second || task.Attempt != 1 {
			t.Fatalf("claimed %+v", task)
		}
		f.claimOne("charge")
	})

	t.Run("AdvanceWithNothingSetsRunning", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease := f.create("run-1")
		if events := f.advance(lease, store.RunAdvanceParams{}); len(events) != 0 {
			t.Fatalf("appended %d events, want none", len(events))
		}
		if run := f.get("run-1"); run.Status != store.RunRunning {
			t.Fatalf("Status = %s, want running", run.Status)
		}
	})

	t.Run("StaleTokenIsLeaseLost", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease := f.create("run-1")
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.RunAdvance(t.Context(), &store.RunAdvanceParams{
				RunID: "run-1", Token: lease.Token + 1, Steps: []store.StepSpec{newStep(1, "charge")},
			})
			return err
		})
		f.claimNone("charge")
	})

	t.Run("FinishedRunIsRunFinishedBeforeTokenCheck", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease := f.create("run-1")
		f.advance(lease, store.RunAdvanceParams{Finish: &store.RunFinish{Status: store.RunCompleted}})
		for _, token := range []int64{lease.Token, lease.Token + 1} {
			f.requireChangedNothing("run-1", store.ErrRunFinished, func() error {
				_, err := f.store.RunAdvance(t.Context(), &store.RunAdvanceParams{
					RunID: "run-1", Token: token, Steps: []store.StepSpec{newStep(1, "charge")},
				})
				return err
			})
		}
	})

	t.Run("MissingRunIsNotFound", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)
		_, err := f.store.RunAdvance(t.Context(), &store.RunAdvanceParams{RunID: "missing", Token: 1})
		requireErr(t, err, store.ErrNotFound)
	})

	t.Run("FinishCompletedDropsTasksAndTimers", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease, running := f.busyRun("run-1")
		f.clock.Advance(time.Second)
		now := f.now()

		events := f.advance(lease, store.RunAdvanceParams{Finish: &store.RunFinish{
			Status: store.RunCompleted, Output: json.RawMessage(`{"total":3}`),
		}})
		want := []store.Event{{Seq: 6, Type: store.EventRunCompleted, At: now, Execution: 1, Output: json.RawMessage(`{"total":3}`)}}
		requireEvents(t, events, want)
		requireEvents(t, f.last("run-1", 1), want)
		run := f.get("run-1")
		if run.Status != store.RunCompleted {
			t.Fatalf("Status = %s, want completed", run.Status)
		}
		requireJSON(t, "Output", run.Output, json.RawMessage(`{"total":3}`))
		requireTime(t, "UpdatedAt", run.UpdatedAt, now)

		requireDropped(f, "run-1", running, "ship")
	})

	t.Run("FinishFailedKeepsError", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease := f.schedule("run-1", newStep(1, "charge"))
		running := f.claimOne("charge")
		runErr := &store.ErrorInfo{Type: "Panic", Message: "boom", Stack: "main.go:1"}
		events := f.advance(lease, store.RunAdvanceParams{Finish: &store.RunFinish{
			Status: store.RunFailed, Error: runErr,
		}})
		want := []store.Event{{Seq: 4, Type: store.EventRunFailed, At: start, Execution: 1, Error: runErr}}
		requireEvents(t, events, want)
		requireEvents(t, f.last("run-1", 1), want)
		run := f.get("run-1")
		if run.Status != store.RunFailed || run.Error == nil || *run.Error != *runErr {
			t.Fatalf("run = %+v, want failed with %+v", run, runErr)
		}
		requireDropped(f, "run-1", running, "charge")
	})

	t.Run("FinishCancelled", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease := f.schedule("run-1", newStep(1, "charge"))
		events := f.advance(lease, store.RunAdvanceParams{Finish: &store.RunFinish{Status: store.RunCancelled}})
		if len(events) != 1 || events[0].Type != store.EventRunCancelled || events[0].Seq != 3 {
			t.Fatalf("events = %s, want RunCancelled at seq 3", dump(events))
		}
		if run := f.get("run-1"); run.Status != store.RunCancelled {
			t.Fatalf("Status = %s, want cancelled", run.Status)
		}
		requireDropped(f, "run-1", nil, "charge")
	})
}

// busyRun creates a run with work of every kind: a running attempt
// (charge, returned), a ready task (ship) and a pending timer (position 3).
func (f *fixture) busyRun(id string) (store.RunLease, *store.Task) {
	f.t.Helper()
	lease := f.schedule(id, newStep(1, "charge"), newStep(2, "ship"))
	f.advance(lease, store.RunAdvanceParams{Timers: []store.TimerSpec{{Position: 3, Delay: time.Second}}})
	return lease, f.claimOne("charge")
}

// requireDropped requires that the run's tasks and timers are gone: the
// claimed task's result is rejected, nothing of step is claimable, no timer
// fires and nothing wakes.
func requireDropped(f *fixture, runID string, claimed *store.Task, step string) {
	f.t.Helper()
	if claimed != nil {
		_, err := f.store.TaskComplete(f.t.Context(), &store.TaskCompleteParams{
			TaskID: claimed.ID, Token: claimed.Token, Output: json.RawMessage(`1`),
		})
		requireErr(f.t, err, store.ErrLeaseLost)
		_, err = f.store.TaskHeartbeat(f.t.Context(), &store.TaskHeartbeatParams{
			TaskID: claimed.ID, Token: claimed.Token, LeaseTTL: minute,
		})
		requireErr(f.t, err, store.ErrLeaseLost)
	}
	f.claimNone(step)
	f.clock.Advance(24 * time.Hour)
	outcomes, err := f.store.TimerFire(f.t.Context(), &store.TimerFireParams{Limit: 10})
	if err != nil {
		f.t.Fatalf("TimerFire: %v", err)
	}
	if len(outcomes) != 0 {
		f.t.Fatalf("timers of a finished run fired: %+v", outcomes)
	}
	wake, err := f.store.NextWake(f.t.Context(), &store.NextWakeParams{})
	if err != nil {
		f.t.Fatalf("NextWake: %v", err)
	}
	if wake != (store.Wake{}) {
		f.t.Fatalf("NextWake = %+v, want nothing pending", wake)
	}
	if n := len(f.history(runID)); n == 0 || f.history(runID)[n-1].Type != store.EventRunCompleted &&
		f.history(runID)[n-1].Type != store.EventRunFailed && f.history(runID)[n-1].Type != store.EventRunCancelled {
		f.t.Fatalf("history of %s does not end with the run's end: %s", runID, dump(f.history(runID)))
	}
}

func stepScheduled(seq int64, at time.Time, s store.StepSpec) store.Event {
	return store.Event{
		Seq: seq, Type: store.EventStepScheduled, At: at, Execution: 1,
		Position: s.Position, Step: s.Name, Input: s.Input,
		Policy: s.PolicyText, IdempotencyKey: s.IdempotencyKey,
	}
}

func testRunCancel(t *testing.T, open Open) {
	t.Run("CancelsActiveRunAndDropsItsWork", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease, running := f.busyRun("run-1")
		f.clock.Advance(time.Second)
		now := f.now()

		c, err := f.store.RunCancel(t.Context(), &store.RunCancelParams{ID: "run-1", Reason: "operator"})
		if err != nil {
			t.Fatalf("RunCancel: %v", err)
		}
		run := c.Run
		if len(c.Descendants) != 0 {
			t.Fatalf("RunCancel of a run without children cancelled %d descendants", len(c.Descendants))
		}
		if run.Status != store.RunCancelled || run.ID != "run-1" {
			t.Fatalf("RunCancel returned %+v", run)
		}
		requireTime(t, "UpdatedAt", run.UpdatedAt, now)
		requireEvents(t, f.last("run-1", 1), []store.Event{{
			Seq: 6, Type: store.EventRunCancelled, At: now, Execution: 1, Reason: "operator",
		}})
		if got := f.get("run-1"); got.Status != store.RunCancelled {
			t.Fatalf("RunGet status = %s, want cancelled", got.Status)
		}
		// The workflow's holder learns the run is over.
		_, err = f.store.RunAdvance(t.Context(), &store.RunAdvanceParams{RunID: "run-1", Token: lease.Token})
		requireErr(t, err, store.ErrRunFinished)
		requireDropped(f, "run-1", running, "ship")
	})

	t.Run("FinishedRunIsRunFinished", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease := f.create("run-1")
		f.advance(lease, store.RunAdvanceParams{Finish: &store.RunFinish{Status: store.RunCompleted}})
		f.requireChangedNothing("run-1", store.ErrRunFinished, func() error {
			_, err := f.store.RunCancel(t.Context(), &store.RunCancelParams{ID: "run-1"})
			return err
		})
	})

	t.Run("MissingRunIsNotFound", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)
		_, err := f.store.RunCancel(t.Context(), &store.RunCancelParams{ID: "missing"})
		requireErr(t, err, store.ErrNotFound)
	})
}

func testHistoryList(t *testing.T, open Open) {
	t.Run("MissingRunIsNotFound", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)
		_, err := f.store.HistoryList(t.Context(), &store.HistoryListParams{RunID: "missing"})
		requireErr(t, err, store.ErrNotFound)
	})

	t.Run("SeqIsGaplessAndAtIsAppendTime", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		// Two runs interleaved: each numbers its own events.
		a := f.schedule("a", newStep(1, "charge"))
		f.clock.Advance(time.Second)
		b := f.schedule("b", newStep(1, "charge"))
		f.clock.Advance(time.Second)
		task := f.claimOne("charge") // a's task: ready earlier
		f.clock.Advance(time.Second)
		f.complete(task)
		f.clock.Advance(time.Second)
		f.advance(a, store.RunAdvanceParams{Finish: &store.RunFinish{Status: store.RunCompleted}})
		f.advance(b, store.RunAdvanceParams{Finish: &store.RunFinish{Status: store.RunCompleted}})

		wantTypes := map[string][]store.EventType{
			"a": {store.EventRunStarted, store.EventStepScheduled, store.EventAttemptStarted, store.EventStepCompleted, store.EventRunCompleted},
			"b": {store.EventRunStarted, store.EventStepScheduled, store.EventRunCompleted},
		}
		wantAt := map[string][]time.Duration{
			"a": {0, 0, 2 * time.Second, 3 * time.Second, 4 * time.Second},
			"b": {time.Second, time.Second, 4 * time.Second},
		}
		for id, types := range wantTypes {
			events := f.history(id)
			if len(events) != len(types) {
				t.Fatalf("history of %s = %s, want types %v", id, dump(events), types)
			}
			for i, e := range events {
				if e.Seq != int64(i+1) || e.Type != types[i] || !e.At.Equal(start.Add(wantAt[id][i])) {
					t.Fatalf("history of %s, event %d = %s, want seq %d type %s at +%v", id, i, dump(events[i:i+1]), i+1, types[i], wantAt[id][i])
				}
			}
			requireTime(t, "UpdatedAt of "+id, f.get(id).UpdatedAt, start.Add(4*time.Second))
		}
	})

	t.Run("AfterSeq", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", newStep(1, "charge"), newStep(2, "ship"))
		all := f.history("run-1")
		for after := int64(0); after <= 4; after++ {
			got, err := f.store.HistoryList(t.Context(), &store.HistoryListParams{RunID: "run-1", AfterSeq: after})
			if err != nil {
				t.Fatalf("HistoryList(AfterSeq %d): %v", after, err)
			}
			requireEvents(t, got, all[min(after, 3):])
		}
	})
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// equalRun compares runs normalized by normRun.
func equalRun(a, b store.Run) bool {
	return reflect.DeepEqual(a, b)
}
