package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"reprise/store"
)

// testLeasedAsScheduled pins what a step leased as it is scheduled to its
// run's owner (the engine's common case: RunAdvance with Lease) is to every
// later write: a task like a claimed one. A store may keep such a step
// elsewhere than a claimed task (docs/benchmarks.md, the run-row layout);
// these are the cases where it would show.
func testLeasedAsScheduled(t *testing.T, open Open) {
	// scheduleLeased creates run id, leased to engine, with one step leased
	// as scheduled to engine for ttl, and returns the run's lease and the
	// step's task.
	scheduleLeased := func(f *fixture, id string, s store.StepSpec, ttl time.Duration) (store.RunLease, *store.Task) {
		f.t.Helper()
		lease := f.create(id)
		adv := f.advanced(lease, store.RunAdvanceParams{LeaseOwner: engine, LeaseTTL: ttl, Steps: []store.StepSpec{leased(s)}})
		if len(adv.Tasks) != 1 {
			f.t.Fatalf("Advanced.Tasks has %d tasks, want 1", len(adv.Tasks))
		}
		return lease, adv.Tasks[0]
	}

	t.Run("HeartbeatsKeepItAndStaleTokensAreLost", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		_, task := scheduleLeased(f, "run-1", newStep(1, "charge"), minute)
		f.clock.Advance(50 * time.Second)
		until, err := f.heartbeat(task, minute)
		if err != nil {
			t.Fatalf("TaskHeartbeat: %v", err)
		}
		requireTime(t, "lease", until, f.now().Add(minute))
		stale := *task
		stale.Token++
		_, err = f.heartbeat(&stale, minute)
		requireErr(t, err, store.ErrLeaseLost)
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.TaskComplete(t.Context(), &store.TaskCompleteParams{TaskID: stale.ID, Token: stale.Token})
			return err
		})

		// Past the first lease, the attempt still holds its step.
		f.clock.Advance(20 * time.Second)
		if got := f.expired(0); len(got) != 0 {
			t.Fatalf("TaskListExpired = %d tasks, want none", len(got))
		}
		if got, err := f.store.TaskGet(t.Context(), task.ID); err != nil || !got.LeaseUntil.Equal(until) {
			t.Fatalf("TaskGet = %+v, %v; want the lease until %v", got, err, until)
		}
		f.complete(task)
		_, err = f.store.TaskGet(t.Context(), task.ID)
		requireErr(t, err, store.ErrNotFound)
	})

	t.Run("LapsedLeaseIsTheReapersAndThenAnyClaimers", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease, task := scheduleLeased(f, "run-1", newStep(1, "charge"), minute)
		f.clock.Advance(minute - time.Microsecond)
		if got := f.expired(0); len(got) != 0 {
			t.Fatalf("TaskListExpired before the lapse = %d tasks", len(got))
		}
		f.clock.Advance(time.Microsecond)
		got := f.expired(0)
		if len(got) != 1 || got[0].ID != task.ID || got[0].Token != task.Token || got[0].Attempt != 1 {
			t.Fatalf("TaskListExpired = %+v, want the leased step's attempt 1", got)
		}
		_, err := f.heartbeat(task, minute)
		requireErr(t, err, store.ErrLeaseLost)
		reap := retryParams(got[0], 0)
		reap.Expired = true
		if _, err := f.store.TaskFail(t.Context(), reap); err != nil {
			t.Fatalf("TaskFail(Expired): %v", err)
		}
		again := f.claimOne("charge")
		if again.ID != task.ID || again.Attempt != 2 || again.Lapses != 1 || again.Token == task.Token {
			t.Fatalf("claimed %+v, want attempt 2 of task %d after one lapse, with a new token", again, task.ID)
		}
		// The run's owner is told of the claimer's result.
		out := f.complete(again)
		if out.RunID != "run-1" || out.Owner != engine {
			t.Fatalf("Outcome = %+v, want run-1 owned by %s", out, engine)
		}
		f.advance(lease, store.RunAdvanceParams{Finish: &store.RunFinish{Status: store.RunCompleted, Output: json.RawMessage(`1`)}})
	})

	t.Run("OutlivesItsRunsLease", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		// The step's lease runs past its run's: the run's owner is gone
		// (as far as the store knows) and another engine takes the run.
		old, task := scheduleLeased(f, "run-1", newStep(1, "charge"), 3*minute)
		f.clock.Advance(minute)
		claimed := f.runClaim(engine2, 10)
		if len(claimed) != 1 || claimed[0].Token == old.Token {
			t.Fatalf("RunClaim = %v, want run-1 with a new token", leaseIDs(claimed))
		}
		if got, err := f.store.TaskGet(t.Context(), task.ID); err != nil || got.Token != task.Token || got.Attempt != 1 {
			t.Fatalf("TaskGet after the run moved = %+v, %v; want the step's attempt 1, leased as before", got, err)
		}
		f.claimNone("charge")

		// The attempt, still leased, retries at once and then succeeds:
		// its results are recorded, and the run's new owner is told.
		f.clock.Advance(time.Second)
		next := f.retryLeased(task, engine, minute)
		if next.Owner != engine2 || next.Next == nil || next.Next.Attempt != 2 {
			t.Fatalf("Outcome = %+v, want attempt 2 and owner %s", next, engine2)
		}
		out := f.complete(next.Next)
		if out.Owner != engine2 || len(out.Events) != 1 || out.Events[0].Type != store.EventStepCompleted || out.Events[0].Attempt != 2 {
			t.Fatalf("Outcome = %+v %s, want StepCompleted of attempt 2 for %s", out, dump(out.Events), engine2)
		}
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.RunAdvance(t.Context(), &store.RunAdvanceParams{RunID: "run-1", Token: old.Token})
			return err
		})
	})

	t.Run("ItsHolderDiesWithTheRunsOwner", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		_, task := scheduleLeased(f, "run-1", newStep(1, "charge"), minute)
		f.clock.Advance(minute)
		if claimed := f.runClaim(engine2, 10); len(claimed) != 1 {
			t.Fatalf("RunClaim = %v, want run-1", leaseIDs(claimed))
		}
		got := f.expired(0)
		if len(got) != 1 || got[0].ID != task.ID {
			t.Fatalf("TaskListExpired = %+v, want the dead owner's step", got)
		}
		reap := retryParams(got[0], time.Second)
		reap.Expired = true
		out, err := f.store.TaskFail(t.Context(), reap)
		if err != nil {
			t.Fatalf("TaskFail(Expired): %v", err)
		}
		if out.Owner != engine2 {
			t.Fatalf("Outcome.Owner = %q, want the run's new owner %s", out.Owner, engine2)
		}
		f.clock.Advance(time.Second)
		if again := f.claimOne("charge"); again.Attempt != 2 || again.Lapses != 1 {
			t.Fatalf("claimed %+v, want attempt 2 after one lapse", again)
		}
	})

	t.Run("RetriedAfterABackoffIsAnyClaimers", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		_, task := scheduleLeased(f, "run-1", newStep(1, "charge"), minute)
		f.retry(task, 10*time.Second)
		f.claimNone("charge")
		f.clock.Advance(10 * time.Second)
		again := f.claimOne("charge")
		if again.ID != task.ID || again.Attempt != 2 || again.Token == task.Token || again.Lapses != 0 {
			t.Fatalf("claimed %+v, want attempt 2 of task %d with a new token", again, task.ID)
		}
		requireTime(t, "FirstStartedAt", again.FirstStartedAt, task.StartedAt)
	})

	t.Run("FailedForGoodIsRedriven", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease, task := scheduleLeased(f, "run-1", newStep(1, "charge"), minute)
		f.failAttempt(task)
		if got := f.last("run-1", 1)[0]; got.Type != store.EventStepFailed || got.Attempt != 1 {
			t.Fatalf("last event = %s, want StepFailed of attempt 1", dump([]store.Event{got}))
		}
		_, err := f.store.TaskGet(t.Context(), task.ID)
		requireErr(t, err, store.ErrNotFound)
		f.failRun(lease)
		if _, err := f.store.RunRedrive(t.Context(), &store.RunRedriveParams{ID: "run-1", By: "operator"}); err != nil {
			t.Fatalf("RunRedrive: %v", err)
		}
		again := f.claimOne("charge")
		if again.Attempt != 2 || again.Base != 1 || again.IdempotencyKey != task.IdempotencyKey {
			t.Fatalf("redriven task = %+v, want attempt 2 over base 1 with key %s", again, task.IdempotencyKey)
		}
		requireJSON(t, "Input", again.Input, task.Input)
		requireJSON(t, "Policy", again.Policy, task.Policy)
	})

	t.Run("CancelledOrEndedRunDropsIt", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		_, cancelled := scheduleLeased(f, "run-1", newStep(1, "charge"), minute)
		if _, err := f.store.RunCancel(t.Context(), &store.RunCancelParams{ID: "run-1"}); err != nil {
			t.Fatalf("RunCancel: %v", err)
		}
		_, err := f.store.TaskGet(t.Context(), cancelled.ID)
		requireErr(t, err, store.ErrNotFound)
		requireDropped(f, "run-1", cancelled, "charge")

		lease, ended := scheduleLeased(f, "run-2", newStep(1, "ship"), minute)
		f.advance(lease, store.RunAdvanceParams{Finish: &store.RunFinish{Status: store.RunCompleted, Output: json.RawMessage(`1`)}})
		_, err = f.store.TaskGet(t.Context(), ended.ID)
		requireErr(t, err, store.ErrNotFound)
		requireDropped(f, "run-2", ended, "ship")
	})
}
