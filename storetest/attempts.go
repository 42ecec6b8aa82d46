package storetest

import (
	"reflect"
	"testing"
	"time"

	"reprise/store"
)

// keepClaim claims up to limit tasks of step for worker with Keep.
func (f *fixture) keepClaim(step string, limit int) []*store.Task {
	f.t.Helper()
	tasks, err := f.store.TaskClaim(f.t.Context(), &store.TaskClaimParams{
		Owner: worker, Steps: []store.StepQuota{{Name: step, Limit: limit}}, LeaseTTL: minute, Keep: true,
	})
	if err != nil {
		f.t.Fatalf("TaskClaim(%s, Keep): %v", step, err)
	}
	return tasks
}

// attempts lists the kept attempts of task id.
func (f *fixture) attempts(id int64) []store.TaskAttempt {
	f.t.Helper()
	got, err := f.store.TaskAttemptList(f.t.Context(), &store.TaskAttemptListParams{TaskID: id})
	if err != nil {
		f.t.Fatalf("TaskAttemptList(%d): %v", id, err)
	}
	return got
}

// kept is what TaskAttemptList lists for an attempt of task.
func kept(task *store.Task) store.TaskAttempt {
	return store.TaskAttempt{TaskID: task.ID, Token: task.Token, RunID: task.RunID, Execution: task.Execution,
		Position: task.Position, Attempt: task.Attempt}
}

func requireAttempts(t *testing.T, got []store.TaskAttempt, want ...store.TaskAttempt) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("kept attempts:\n got %+v\nwant %+v", got, want)
	}
}

func testTaskAttemptList(t *testing.T, open Open) {
	t.Run("KeepsEachAttemptPastTheTask", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", newStep(1, "resize"))
		first := f.keepClaim("resize", 1)[0]
		requireAttempts(t, f.attempts(first.ID), kept(first))
		f.retry(first, 0)
		f.clock.Advance(time.Second)
		second := f.keepClaim("resize", 1)[0]
		if second.ID != first.ID || second.Token == first.Token {
			t.Fatalf("second claim: task %d token %d, want task %d with a new token", second.ID, second.Token, first.ID)
		}
		requireAttempts(t, f.attempts(first.ID), kept(first), kept(second))

		// The task goes with its result; its attempts stay.
		f.complete(second)
		if _, err := f.store.TaskGet(t.Context(), first.ID); err == nil {
			t.Fatal("the completed step's task is still there")
		}
		requireAttempts(t, f.attempts(first.ID), kept(first), kept(second))
	})

	t.Run("KeepsEveryTaskOfAClaim", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", newStep(1, "resize"), newStep(2, "resize"))
		f.schedule("run-2", newStep(1, "resize"))
		tasks := f.keepClaim("resize", 10)
		if len(tasks) != 3 {
			t.Fatalf("claimed %d tasks, want 3", len(tasks))
		}
		for _, task := range tasks {
			requireAttempts(t, f.attempts(task.ID), kept(task))
		}
		// A run cancelled drops its tasks, not their attempts.
		if _, err := f.store.RunCancel(t.Context(), &store.RunCancelParams{ID: "run-2", Reason: "test"}); err != nil {
			t.Fatalf("RunCancel: %v", err)
		}
		for _, task := range tasks {
			requireAttempts(t, f.attempts(task.ID), kept(task))
		}
	})

	t.Run("NoneWithoutKeep", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", newStep(1, "charge"))
		task := f.claimOne("charge")
		requireAttempts(t, f.attempts(task.ID))
		f.complete(task)
		requireAttempts(t, f.attempts(task.ID))
		requireAttempts(t, f.attempts(task.ID+1000))
	})
}
