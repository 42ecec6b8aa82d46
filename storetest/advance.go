package storetest

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"reprise/store"
)

// leased returns s marked to be leased as it is scheduled.
func leased(s store.StepSpec) store.StepSpec {
	s.Lease = true
	return s
}

func testRunAdvanceLease(t *testing.T, open Open) {
	t.Run("LeasesMarkedStepsAsAClaimWould", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease := f.create("run-1")
		f.clock.Advance(time.Second)
		now := f.now()
		charge := leased(withTimeout(newStep(1, "charge"), 10*time.Second))
		ship := newStep(2, "ship")
		email := leased(newStep(3, "email"))
		adv := f.advanced(lease, store.RunAdvanceParams{
			LeaseOwner: worker, LeaseTTL: minute,
			Steps: []store.StepSpec{email, ship, charge},
		})
		if len(adv.Tasks) != 2 {
			t.Fatalf("Advanced.Tasks has %d tasks, want 2", len(adv.Tasks))
		}
		for i, want := range []struct {
			s     store.StepSpec
			until time.Time
		}{{charge, now.Add(10 * time.Second)}, {email, now.Add(minute)}} {
			task := adv.Tasks[i]
			if task.ID == 0 || task.Token == 0 || task.RunID != "run-1" || task.Execution != 1 ||
				task.Position != want.s.Position || task.Step != want.s.Name || task.IdempotencyKey != want.s.IdempotencyKey ||
				task.Timeout != want.s.Timeout || task.Attempt != 1 || task.Base != 0 || task.Lapses != 0 {
				t.Fatalf("leased task %d = %+v", i, task)
			}
			requireJSON(t, "Input", task.Input, want.s.Input)
			requireJSON(t, "Policy", task.Policy, want.s.Policy)
			requireTime(t, "LeaseUntil", task.LeaseUntil, want.until)
			requireTime(t, "StartedAt", task.StartedAt, now)
			requireTime(t, "FirstStartedAt", task.FirstStartedAt, now)
			got, err := f.store.TaskGet(t.Context(), task.ID)
			if err != nil || !reflect.DeepEqual(normTask(got), normTask(task)) {
				t.Fatalf("TaskGet = %+v, %v; want the leased task %+v", got, err, task)
			}
		}
		attemptStarted := func(seq int64, s store.StepSpec, until time.Time) store.Event {
			return store.Event{
				Seq: seq, Type: store.EventAttemptStarted, At: now, Execution: 1, Position: s.Position, Step: s.Name,
				Attempt: 1, Worker: worker, LeaseUntil: until, IdempotencyKey: s.IdempotencyKey,
			}
		}
		want := []store.Event{
			stepScheduled(2, now, charge),
			attemptStarted(3, charge, now.Add(10*time.Second)),
			stepScheduled(4, now, ship),
			stepScheduled(5, now, email),
			attemptStarted(6, email, now.Add(minute)),
		}
		requireEvents(t, adv.Events, want)
		requireEvents(t, f.history("run-1")[1:], want)

		// The leased tasks are nobody else's to claim; the other is ready.
		f.claimNone("charge")
		f.claimNone("email")
		f.claimOne("ship")
		requireWake(f, []string{"charge"}, store.Wake{Lease: now.Add(10 * time.Second)})

		// The leaseholder reports as a claimer would.
		out := f.complete(adv.Tasks[0])
		requireEvents(t, out.Events, []store.Event{{
			Seq: 8, Type: store.EventStepCompleted, At: now, Execution: 1, Position: 1, Step: "charge",
			Attempt: 1, Output: json.RawMessage(`"done"`),
		}})
		f.clock.Advance(30 * time.Second)
		f.retry(adv.Tasks[1], 0)
		if again := f.claimOne("email"); again.Attempt != 2 || again.Token == adv.Tasks[1].Token {
			t.Fatalf("reclaimed %+v, want attempt 2 with a new token", again)
		}
	})

	t.Run("WithoutLeaseOwnerIsAnError", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease := f.create("run-1")
		before := f.history("run-1")
		_, err := f.store.RunAdvance(t.Context(), &store.RunAdvanceParams{
			RunID: "run-1", Token: lease.Token, Steps: []store.StepSpec{leased(newStep(1, "charge"))},
		})
		if err == nil {
			t.Fatal("RunAdvance leased a step to nobody")
		}
		requireEvents(t, f.history("run-1"), before)
		f.claimNone("charge")
	})
}

func testRunAdvanceFeatures(t *testing.T, open Open) {
	t.Run("MarkersAndChildrenInPositionOrder", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease := f.create("run-1")
		now := f.now()
		charge := newStep(2, "charge")
		events := f.advance(lease, store.RunAdvanceParams{
			Steps:    []store.StepSpec{charge},
			Timers:   []store.TimerSpec{{Position: 5, Delay: time.Second}},
			Markers:  []store.MarkerSpec{{Position: 4, Name: "new-pricing", Version: 2}, {Position: 1, Name: "fix-42", Version: 1}},
			Children: []store.ChildSpec{{Position: 3, ID: "child-1", Workflow: "refund", Input: json.RawMessage(`{"amount":5}`)}},
		})
		want := []store.Event{
			{Seq: 2, Type: store.EventVersionMarker, At: now, Execution: 1, Position: 1, Change: "fix-42", Version: 1},
			stepScheduled(3, now, charge),
			{
				Seq: 4, Type: store.EventChildStarted, At: now, Execution: 1, Position: 3, Child: "child-1",
				Workflow: "refund", Input: json.RawMessage(`{"amount":5}`),
			},
			{Seq: 5, Type: store.EventVersionMarker, At: now, Execution: 1, Position: 4, Change: "new-pricing", Version: 2},
			{Seq: 6, Type: store.EventTimerScheduled, At: now, Execution: 1, Position: 5, Delay: time.Second, FireAt: now.Add(time.Second)},
		}
		requireEvents(t, events, want)
		requireEvents(t, f.history("run-1")[1:], want)
	})

	t.Run("MarkersGoWithTheEnd", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		// A marker is an event, not a row: an advance that ends the
		// run's execution, or the run, records it before the end.
		lease := f.create("run-1")
		now := f.now()
		next := json.RawMessage(`{"cursor":2}`)
		moved := f.advance(lease, store.RunAdvanceParams{
			Markers: []store.MarkerSpec{{Position: 1, Name: "fix-42", Version: 1}},
			Finish:  &store.RunFinish{ContinueAsNew: true, Input: next},
		})
		requireEvents(t, moved, []store.Event{
			{Seq: 2, Type: store.EventVersionMarker, At: now, Execution: 1, Position: 1, Change: "fix-42", Version: 1},
			{Seq: 3, Type: store.EventRunContinuedAsNew, At: now, Execution: 1, Input: next},
			{Seq: 4, Type: store.EventRunStarted, At: now, Execution: 2, Workflow: "order", Input: next},
		})
		ended := f.advance(lease, store.RunAdvanceParams{
			Markers: []store.MarkerSpec{{Position: 1, Name: "fix-43", Version: 2}},
			Finish:  &store.RunFinish{Status: store.RunCompleted, Output: json.RawMessage(`1`)},
		})
		requireEvents(t, ended, []store.Event{
			{Seq: 5, Type: store.EventVersionMarker, At: now, Execution: 2, Position: 1, Change: "fix-43", Version: 2},
			{Seq: 6, Type: store.EventRunCompleted, At: now, Execution: 2, Output: json.RawMessage(`1`)},
		})
		requireEvents(t, f.history("run-1")[1:], append(moved, ended...))
	})

	t.Run("CancelsDropTasksAndTimersAfterScheduling", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease, running := f.busyRun("run-1") // charge running, ship ready, timer 3
		f.clock.Advance(time.Second)
		now := f.now()
		events := f.advance(lease, store.RunAdvanceParams{
			Steps:   []store.StepSpec{newStep(4, "email")},
			Cancels: []int{1, 3, 4, 9},
		})
		requireEvents(t, events, []store.Event{
			stepScheduled(6, now, newStep(4, "email")),
			{Seq: 7, Type: store.EventStepCancelRequested, At: now, Execution: 1, Position: 1, Step: "charge"},
			{Seq: 8, Type: store.EventStepCancelRequested, At: now, Execution: 1, Position: 4, Step: "email"},
		})
		// The cancelled attempt's result is rejected; its task is gone.
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.TaskComplete(t.Context(), &store.TaskCompleteParams{TaskID: running.ID, Token: running.Token})
			return err
		})
		_, err := f.store.TaskGet(t.Context(), running.ID)
		requireErr(t, err, store.ErrNotFound)
		f.claimNone("email")
		// The cancelled timer never fires; the step not cancelled runs.
		f.clock.Advance(time.Hour)
		if out, err := f.store.TimerFire(t.Context(), &store.TimerFireParams{}); err != nil || len(out) != 0 {
			t.Fatalf("TimerFire = %+v, %v; want nothing", out, err)
		}
		f.complete(f.claimOne("ship"))
	})

	t.Run("ContinueAsNewStartsTheNextExecution", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease, running := f.busyRun("run-1")
		f.advance(lease, store.RunAdvanceParams{Children: []store.ChildSpec{{Position: 4, ID: "child-1", Workflow: "refund"}}})
		f.clock.Advance(time.Second)
		now := f.now()
		next := json.RawMessage(`{"cursor":2}`)
		adv := f.advanced(lease, store.RunAdvanceParams{Finish: &store.RunFinish{ContinueAsNew: true, Input: next}})
		want := []store.Event{
			{Seq: 7, Type: store.EventRunContinuedAsNew, At: now, Execution: 1, Input: next},
			{Seq: 8, Type: store.EventRunStarted, At: now, Execution: 2, Workflow: "order", Input: next},
		}
		requireEvents(t, adv.Events, want)
		requireEvents(t, f.last("run-1", 2), want)
		if adv.Parent != nil {
			t.Fatalf("Advanced.Parent = %+v for a run without a parent", adv.Parent)
		}
		run := f.get("run-1")
		if run.Status != store.RunRunning || run.Execution != 2 {
			t.Fatalf("run = %+v, want running in execution 2", run)
		}
		requireJSON(t, "Input", run.Input, next)

		// The old execution's work is gone: its results are rejected, its
		// ready task is not claimable, its timer never fires.
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.TaskComplete(t.Context(), &store.TaskCompleteParams{TaskID: running.ID, Token: running.Token})
			return err
		})
		f.claimNone("ship")
		if got := f.runClaim(engine2, 10); len(got) != 0 {
			t.Fatalf("RunClaim took a leased run: %v", leaseIDs(got))
		}
		f.clock.Advance(time.Hour)
		if out, err := f.store.TimerFire(t.Context(), &store.TimerFireParams{}); err != nil || len(out) != 0 {
			t.Fatalf("TimerFire = %+v, %v; want nothing", out, err)
		}
		// Its children are cancelled, as if the run had ended.
		requireEvents(t, f.last("child-1", 1), []store.Event{{
			Seq: 2, Type: store.EventRunCancelled, At: now, Execution: 1, Reason: "parent finished",
		}})

		// The same token advances the next execution; positions start afresh.
		events := f.advance(lease, store.RunAdvanceParams{Steps: []store.StepSpec{newStep(1, "charge")}})
		if len(events) != 1 || events[0].Execution != 2 || events[0].Seq != 9 {
			t.Fatalf("events = %s, want StepScheduled of execution 2 at seq 9", dump(events))
		}
		if task := f.claimOne("charge"); task.Execution != 2 || task.Position != 1 || task.Attempt != 1 {
			t.Fatalf("claimed %+v, want attempt 1 of execution 2", task)
		}
	})
}
