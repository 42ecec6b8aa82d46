package storetest

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"reprise/store"
)

func testTaskGet(t *testing.T, open Open) {
	get := func(f *fixture, id int64) *store.Task {
		f.t.Helper()
		task, err := f.store.TaskGet(f.t.Context(), id)
		if err != nil {
			f.t.Fatalf("TaskGet(%d): %v", id, err)
		}
		return task
	}

	t.Run("ReturnsTheTaskAsItStands", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		s := withTimeout(newStep(1, "charge"), time.Hour)
		f.schedule("run-1", s)
		claimed := f.claimOne("charge")
		if got := get(f, claimed.ID); !reflect.DeepEqual(normTask(got), normTask(claimed)) {
			t.Fatalf("TaskGet of a leased task = %+v, want %+v", got, claimed)
		}

		// Retried: not leased, attempt count kept.
		f.clock.Advance(time.Second)
		f.retry(claimed, time.Minute)
		got := get(f, claimed.ID)
		if got.RunID != "run-1" || got.Execution != 1 || got.Position != 1 || got.Step != "charge" ||
			got.IdempotencyKey != s.IdempotencyKey || got.Timeout != time.Hour || got.Attempt != 1 || !got.LeaseUntil.IsZero() {
			t.Fatalf("TaskGet of a retried task = %+v", got)
		}
		requireJSON(t, "Input", got.Input, s.Input)
		requireJSON(t, "Policy", got.Policy, s.Policy)
		requireTime(t, "FirstStartedAt", got.FirstStartedAt, claimed.FirstStartedAt)
	})

	t.Run("DoneOrDroppedIsNotFound", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		_, err := f.store.TaskGet(t.Context(), 12345)
		requireErr(t, err, store.ErrNotFound)

		f.schedule("run-1", newStep(1, "charge"), newStep(2, "ship"))
		done := f.claimOne("charge")
		f.complete(done)
		_, err = f.store.TaskGet(t.Context(), done.ID)
		requireErr(t, err, store.ErrNotFound)

		dropped := f.claimOne("ship")
		if _, err := f.store.RunCancel(t.Context(), &store.RunCancelParams{ID: "run-1"}); err != nil {
			t.Fatalf("RunCancel: %v", err)
		}
		_, err = f.store.TaskGet(t.Context(), dropped.ID)
		requireErr(t, err, store.ErrNotFound)
	})
}

// normTask makes equal tasks deeply equal. ReadyAt is left out: only a
// start carries it, not a read of the task as it stands.
func normTask(t *store.Task) store.Task {
	n := *t
	n.ReadyAt = time.Time{}
	n.LeaseUntil = normTime(n.LeaseUntil)
	n.StartedAt = normTime(n.StartedAt)
	n.FirstStartedAt = normTime(n.FirstStartedAt)
	n.Input = normJSON(n.Input)
	n.Policy = normJSON(n.Policy)
	return n
}

// heartbeat extends the task's lease by ttl.
func (f *fixture) heartbeat(task *store.Task, ttl time.Duration) (time.Time, error) {
	return f.store.TaskHeartbeat(f.t.Context(), &store.TaskHeartbeatParams{
		TaskID: task.ID, Token: task.Token, LeaseTTL: ttl,
	})
}

// expired lists up to limit tasks whose lease has lapsed (zero: the
// store's default).
func (f *fixture) expired(limit int) []*store.Task {
	f.t.Helper()
	tasks, err := f.store.TaskListExpired(f.t.Context(), &store.TaskListExpiredParams{Limit: limit})
	if err != nil {
		f.t.Fatalf("TaskListExpired: %v", err)
	}
	return tasks
}

func testTaskHeartbeat(t *testing.T, open Open) {
	t.Run("ExtendsLease", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", newStep(1, "charge"))
		task := f.claimOne("charge")
		f.clock.Advance(50 * time.Second)
		until, err := f.heartbeat(task, minute)
		if err != nil {
			t.Fatalf("TaskHeartbeat: %v", err)
		}
		requireTime(t, "lease", until, start.Add(50*time.Second+minute))

		// Past the first lease, the attempt still holds its task.
		f.clock.Advance(20 * time.Second)
		expired, err := f.store.TaskListExpired(t.Context(), &store.TaskListExpiredParams{})
		if err != nil || len(expired) != 0 {
			t.Fatalf("TaskListExpired = %d tasks, %v; want none", len(expired), err)
		}
		f.complete(task)
	})

	t.Run("NeverPastTimeout", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", withTimeout(newStep(1, "charge"), 90*time.Second))
		f.clock.Advance(time.Second)
		task := f.claimOne("charge")
		f.clock.Advance(50 * time.Second)
		until, err := f.heartbeat(task, minute)
		if err != nil {
			t.Fatalf("TaskHeartbeat: %v", err)
		}
		requireTime(t, "lease", until, task.StartedAt.Add(90*time.Second))
		f.clock.Advance(40 * time.Second) // at the timeout: lapsed
		_, err = f.heartbeat(task, minute)
		requireErr(t, err, store.ErrLeaseLost)
	})

	t.Run("StaleLapsedOrGoneIsLeaseLost", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", newStep(1, "charge"), newStep(2, "ship"))
		task := f.claimOne("charge")
		stale := *task
		stale.Token++
		_, err := f.heartbeat(&stale, minute)
		requireErr(t, err, store.ErrLeaseLost)

		f.clock.Advance(minute) // now == LeaseUntil: lapsed
		_, err = f.heartbeat(task, minute)
		requireErr(t, err, store.ErrLeaseLost)

		ship := f.claimOne("ship")
		f.complete(ship)
		_, err = f.heartbeat(ship, minute)
		requireErr(t, err, store.ErrLeaseLost)
	})
}

func testTaskComplete(t *testing.T, open Open) {
	t.Run("AppendsStepCompletedAndRemovesTask", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", newStep(1, "charge"))
		task := f.claimOne("charge")
		f.clock.Advance(time.Second)
		now := f.now()
		out, err := f.store.TaskComplete(t.Context(), &store.TaskCompleteParams{
			TaskID: task.ID, Token: task.Token, Output: json.RawMessage(`{"charged":42}`),
		})
		if err != nil {
			t.Fatalf("TaskComplete: %v", err)
		}
		want := []store.Event{{
			Seq: 4, Type: store.EventStepCompleted, At: now, Execution: 1,
			Position: 1, Step: "charge", Attempt: 1, Output: json.RawMessage(`{"charged":42}`),
		}}
		if out.RunID != "run-1" || out.Owner != engine {
			t.Fatalf("Outcome = %+v, want run-1 owned by %s", out, engine)
		}
		requireEvents(t, out.Events, want)
		requireEvents(t, f.last("run-1", 1), want)

		// The task is gone: a second report and a claim find nothing.
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.TaskComplete(t.Context(), &store.TaskCompleteParams{TaskID: task.ID, Token: task.Token})
			return err
		})
		f.claimNone("charge")
	})

	t.Run("OwnerIsTheRunsLeaseHolder", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		// A run nobody holds.
		_, _, err := f.store.RunCreate(t.Context(), &store.RunCreateParams{ID: "free", Workflow: "order", Input: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatalf("RunCreate: %v", err)
		}
		lease := f.runClaim(engine, 1)[0]
		f.advance(lease, store.RunAdvanceParams{Steps: []store.StepSpec{newStep(1, "charge"), newStep(2, "ship")}})
		if out := f.complete(f.claimOne("charge")); out.Owner != engine {
			t.Fatalf("Owner = %q, want %q", out.Owner, engine)
		}
		// After another engine takes the run over, results go to it.
		f.clock.Advance(minute)
		task := f.claimOne("ship")
		if got := f.runClaim(engine2, 1); len(got) != 1 {
			t.Fatalf("RunClaim got %d runs, want 1", len(got))
		}
		if out := f.complete(task); out.Owner != engine2 {
			t.Fatalf("Owner = %q, want %q", out.Owner, engine2)
		}
	})

	t.Run("OwnerIsEmptyWhenNoneHoldsTheRun", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		// A run created without an owner is advanced with its zero token.
		lease, _, err := f.store.RunCreate(t.Context(), &store.RunCreateParams{ID: "free", Workflow: "order", Input: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatalf("RunCreate: %v", err)
		}
		f.advance(lease, store.RunAdvanceParams{Steps: []store.StepSpec{newStep(1, "charge")}})
		if out := f.complete(f.claimOne("charge")); out.Owner != "" || out.RunID != "free" {
			t.Fatalf("Outcome = %+v, want run free with no owner", out)
		}
	})

	t.Run("StaleTokenIsLeaseLost", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", newStep(1, "charge"))
		task := f.claimOne("charge")
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.TaskComplete(t.Context(), &store.TaskCompleteParams{TaskID: task.ID, Token: task.Token + 1})
			return err
		})
		f.complete(task)
	})

	t.Run("LapsedLeaseIsLeaseLost", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", withTimeout(newStep(1, "charge"), 10*time.Second))
		task := f.claimOne("charge")
		f.clock.Advance(10 * time.Second) // now == LeaseUntil: lapsed
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.TaskComplete(t.Context(), &store.TaskCompleteParams{TaskID: task.ID, Token: task.Token})
			return err
		})
		// The reaper still finds it.
		expired, err := f.store.TaskListExpired(t.Context(), &store.TaskListExpiredParams{})
		if err != nil || len(expired) != 1 || expired[0].ID != task.ID {
			t.Fatalf("TaskListExpired = %+v, %v; want the task", expired, err)
		}
	})

	t.Run("DroppedTasksTokenNeverMatchesANewTask", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("old", newStep(1, "charge"))
		stale := f.claimOne("charge")
		if _, err := f.store.RunCancel(t.Context(), &store.RunCancelParams{ID: "old"}); err != nil {
			t.Fatalf("RunCancel: %v", err)
		}
		f.schedule("new", newStep(1, "charge"))
		fresh := f.claimOne("charge")
		f.requireChangedNothing("new", store.ErrLeaseLost, func() error {
			_, err := f.store.TaskComplete(t.Context(), &store.TaskCompleteParams{TaskID: stale.ID, Token: stale.Token})
			return err
		})
		if out := f.complete(fresh); out.RunID != "new" {
			t.Fatalf("Outcome = %+v, want run new", out)
		}
	})
}

func testTaskFail(t *testing.T, open Open) {
	netErr := store.ErrorInfo{Type: "NetworkError", Message: "connection reset"}

	t.Run("RetryMakesTaskReadyAfterDelay", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		s := newStep(1, "charge")
		f.schedule("run-1", s)
		first := f.claimOne("charge")
		f.clock.Advance(time.Second)
		now := f.now()
		retryAt := now.Add(10 * time.Second)

		out := f.retry(first, 10*time.Second)
		want := []store.Event{{
			Seq: 4, Type: store.EventAttemptFailed, At: now, Execution: 1,
			Position: 1, Step: "charge", Attempt: 1, Error: &netErr,
			Delay: 10 * time.Second, RetryAt: retryAt, Rule: "[retry: 3, backoff: 1s]",
		}}
		if out.RunID != "run-1" || out.Owner != engine {
			t.Fatalf("Outcome = %+v, want run-1 owned by %s", out, engine)
		}
		requireEvents(t, out.Events, want)
		requireEvents(t, f.last("run-1", 1), want)
		requireWake(f, nil, store.Wake{Task: retryAt})

		// Waiting for its retry, the task has no lease for any report.
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.TaskComplete(t.Context(), &store.TaskCompleteParams{TaskID: first.ID, Token: first.Token})
			return err
		})
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.TaskHeartbeat(t.Context(), &store.TaskHeartbeatParams{TaskID: first.ID, Token: first.Token, LeaseTTL: minute})
			return err
		})
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			p := retryParams(first, 0)
			p.Expired = true
			_, err := f.store.TaskFail(t.Context(), p)
			return err
		})

		f.clock.Advance(10*time.Second - time.Microsecond)
		f.claimNone("charge")
		f.clock.Advance(time.Microsecond)
		second := f.claimOne("charge")
		if second.ID != first.ID || second.Attempt != 2 || second.Token == first.Token {
			t.Fatalf("second claim = %+v, want task %d attempt 2 with a new token (old %d)", second, first.ID, first.Token)
		}
		requireTime(t, "StartedAt", second.StartedAt, retryAt)
		requireTime(t, "FirstStartedAt", second.FirstStartedAt, first.StartedAt)
		requireJSON(t, "Input", second.Input, s.Input)

		// The first attempt's token is fenced off.
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.TaskComplete(t.Context(), &store.TaskCompleteParams{TaskID: first.ID, Token: first.Token})
			return err
		})
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.TaskFail(t.Context(), retryParams(first, 0))
			return err
		})
		f.complete(second)
	})

	t.Run("StopAppendsStepFailedAndRemovesTask", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", newStep(1, "charge"))
		f.retry(f.claimOne("charge"), 0)
		task := f.claimOne("charge")
		f.clock.Advance(time.Second)
		now := f.now()
		out, err := f.store.TaskFail(t.Context(), &store.TaskFailParams{
			TaskID: task.ID, Token: task.Token, Error: netErr, Rule: "[retry: 1]", Reason: "exhausted",
		})
		if err != nil {
			t.Fatalf("TaskFail: %v", err)
		}
		want := []store.Event{
			{
				Seq: 6, Type: store.EventAttemptFailed, At: now, Execution: 1,
				Position: 1, Step: "charge", Attempt: 2, Error: &netErr, Rule: "[retry: 1]", Reason: "exhausted",
			},
			{
				Seq: 7, Type: store.EventStepFailed, At: now, Execution: 1,
				Position: 1, Step: "charge", Attempt: 2, Error: &netErr, Reason: "exhausted",
			},
		}
		requireEvents(t, out.Events, want)
		requireEvents(t, f.last("run-1", 2), want)
		f.claimNone("charge")
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.TaskComplete(t.Context(), &store.TaskCompleteParams{TaskID: task.ID, Token: task.Token})
			return err
		})
	})

	t.Run("ExpiredOnlyAfterLapse", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", newStep(1, "charge"))
		task := f.claimOne("charge")
		reap := &store.TaskFailParams{
			TaskID: task.ID, Token: task.Token, Expired: true, Retry: true, Delay: time.Second,
			Error: store.ErrorInfo{Type: "Timeout", Message: "lease expired"}, Rule: "[retry: 3]",
		}
		f.clock.Advance(minute - time.Microsecond)
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.TaskFail(t.Context(), reap)
			return err
		})

		f.clock.Advance(time.Microsecond) // now == LeaseUntil: lapsed
		// The worker's late writes are all rejected.
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.TaskComplete(t.Context(), &store.TaskCompleteParams{TaskID: task.ID, Token: task.Token})
			return err
		})
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.TaskFail(t.Context(), retryParams(task, 0))
			return err
		})
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.TaskHeartbeat(t.Context(), &store.TaskHeartbeatParams{TaskID: task.ID, Token: task.Token, LeaseTTL: minute})
			return err
		})

		// The reaper's write goes through, once.
		out, err := f.store.TaskFail(t.Context(), reap)
		if err != nil {
			t.Fatalf("TaskFail(Expired): %v", err)
		}
		now := f.now()
		requireEvents(t, out.Events, []store.Event{{
			Seq: 4, Type: store.EventAttemptFailed, At: now, Execution: 1, Position: 1, Step: "charge",
			Attempt: 1, Error: &reap.Error, Rule: "[retry: 3]", Delay: time.Second, RetryAt: now.Add(time.Second),
		}})
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.TaskFail(t.Context(), reap)
			return err
		})
		f.clock.Advance(time.Second)
		if again := f.claimOne("charge"); again.Attempt != 2 {
			t.Fatalf("reclaimed as attempt %d, want 2", again.Attempt)
		}
	})

	t.Run("ExpiredStopFailsStep", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", withTimeout(newStep(1, "charge"), time.Second))
		task := f.claimOne("charge")
		f.clock.Advance(time.Second)
		out, err := f.store.TaskFail(t.Context(), &store.TaskFailParams{
			TaskID: task.ID, Token: task.Token, Expired: true,
			Error: store.ErrorInfo{Type: "Timeout", Message: "attempt timed out"}, Reason: "exhausted",
		})
		if err != nil {
			t.Fatalf("TaskFail(Expired): %v", err)
		}
		if len(out.Events) != 2 || out.Events[1].Type != store.EventStepFailed {
			t.Fatalf("events = %s, want AttemptFailed, StepFailed", dump(out.Events))
		}
		f.clock.Advance(time.Hour)
		f.claimNone("charge")
	})

	t.Run("LapsesCountExpiredLeasesInARow", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", newStep(1, "charge"))
		// lapse lets the lease lapse, has the reaper retry, and claims again.
		lapse := func(task *store.Task) *store.Task {
			t.Helper()
			f.clock.Advance(minute)
			p := retryParams(task, 0)
			p.Expired = true
			if _, err := f.store.TaskFail(t.Context(), p); err != nil {
				t.Fatalf("TaskFail(Expired): %v", err)
			}
			return f.claimOne("charge")
		}
		lapses := func(task *store.Task, want int) {
			t.Helper()
			if task.Lapses != want {
				t.Fatalf("claimed Lapses = %d, want %d", task.Lapses, want)
			}
			for _, where := range []string{"TaskGet", "TaskListExpired"} {
				var got *store.Task
				if where == "TaskGet" {
					got, _ = f.store.TaskGet(t.Context(), task.ID)
				} else {
					f.clock.Advance(minute)
					expired, _ := f.store.TaskListExpired(t.Context(), &store.TaskListExpiredParams{})
					f.clock.Advance(-minute)
					if len(expired) == 1 {
						got = expired[0]
					}
				}
				if got == nil || got.Lapses != want || got.Base != 0 {
					t.Fatalf("%s = %+v, want Lapses %d", where, got, want)
				}
			}
		}
		task := f.claimOne("charge")
		lapses(task, 0)
		task = lapse(task)
		lapses(task, 1)
		task = lapse(task)
		lapses(task, 2)
		// Any other result resets the count.
		f.retry(task, 0)
		task = f.claimOne("charge")
		lapses(task, 0)
		task = lapse(task)
		lapses(task, 1)
		f.complete(task)
	})

	t.Run("StaleTokenIsLeaseLost", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", newStep(1, "charge"))
		task := f.claimOne("charge")
		stale := *task
		stale.Token++
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.TaskFail(t.Context(), retryParams(&stale, 0))
			return err
		})
	})
}

func testTaskListExpired(t *testing.T, open Open) {
	t.Run("ListsLapsedLeasesOnly", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", newStep(1, "charge"), newStep(2, "ship"), newStep(3, "email"))
		charge := f.claimOne("charge")
		f.claim(worker, "ship", 1, 2*minute)
		// email stays unleased.
		f.clock.Advance(minute - time.Microsecond)
		if got := f.expired(10); len(got) != 0 {
			t.Fatalf("listed %d tasks before any lease lapsed", len(got))
		}
		f.clock.Advance(time.Microsecond)
		got := f.expired(10)
		if len(got) != 1 || got[0].ID != charge.ID {
			t.Fatalf("listed %+v, want the charge task", got)
		}
		if g := got[0]; g.Token != charge.Token || g.Attempt != 1 || g.RunID != "run-1" || g.Step != "charge" ||
			g.Position != 1 || g.Execution != 1 || !g.LeaseUntil.Equal(charge.LeaseUntil) ||
			!g.StartedAt.Equal(charge.StartedAt) || g.IdempotencyKey != charge.IdempotencyKey {
			t.Fatalf("listed %+v, want %+v", g, charge)
		}
	})

	t.Run("Limit", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		steps := make([]store.StepSpec, 102)
		for i := range steps {
			steps[i] = newStep(i+1, "charge")
		}
		f.schedule("run-1", steps...)
		f.claim(worker, "charge", 200, minute)
		f.clock.Advance(minute)
		if got := len(f.expired(0)); got != 100 {
			t.Fatalf("Limit 0 listed %d tasks, want 100", got)
		}
		if got := len(f.expired(5)); got != 5 {
			t.Fatalf("Limit 5 listed %d tasks, want 5", got)
		}
		if got := len(f.expired(200)); got != 102 {
			t.Fatalf("Limit 200 listed %d tasks, want 102", got)
		}
	})
}
