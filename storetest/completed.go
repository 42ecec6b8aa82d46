package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"reprise/store"
)

func testRunAdvanceCompleted(t *testing.T, open Open) {
	// start creates a run whose first step is leased to engine.
	start := func(f *fixture, id string) (store.RunLease, *store.Task) {
		lease := f.create(id)
		adv := f.advanced(lease, store.RunAdvanceParams{
			LeaseOwner: engine, LeaseTTL: minute, Steps: []store.StepSpec{leased(newStep(1, "charge"))},
		})
		if len(adv.Tasks) != 1 {
			f.t.Fatalf("leased %d tasks, want 1", len(adv.Tasks))
		}
		return lease, adv.Tasks[0]
	}
	result := func(task *store.Task) store.TaskCompleteParams {
		return store.TaskCompleteParams{TaskID: task.ID, Token: task.Token, Output: json.RawMessage(`"paid"`)}
	}

	t.Run("RecordsWhatTaskCompleteThenAdvanceWould", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		twoLease, twoTask := start(f, "two")
		f.clock.Advance(time.Second)
		if _, err := f.store.TaskComplete(t.Context(), &store.TaskCompleteParams{
			TaskID: twoTask.ID, Token: twoTask.Token, Output: json.RawMessage(`"paid"`),
		}); err != nil {
			t.Fatal(err)
		}
		f.advance(twoLease, store.RunAdvanceParams{Steps: []store.StepSpec{newStep(2, "ship")}})

		f.clock.Advance(-time.Second)
		oneLease, oneTask := start(f, "one")
		f.clock.Advance(time.Second)
		events := f.advance(oneLease, store.RunAdvanceParams{
			Completed: []store.TaskCompleteParams{result(oneTask)},
			Steps:     []store.StepSpec{newStep(2, "ship")},
		})

		two, one := f.history("two"), f.history("one")
		requireEvents(t, one[len(one)-2:], two[len(two)-2:])
		two[0].Input, one[0].Input = nil, nil // each run's own input
		requireEvents(t, one, two)
		requireEvents(t, events, one[len(one)-2:])
		if _, err := f.store.TaskGet(t.Context(), oneTask.ID); err == nil {
			t.Fatal("the completed step's task is still there")
		}
		// The result is recorded: a late TaskComplete of it is stale.
		_, err := f.store.TaskComplete(t.Context(), &store.TaskCompleteParams{TaskID: oneTask.ID, Token: oneTask.Token})
		requireErr(t, err, store.ErrLeaseLost)
	})

	t.Run("WithFinish", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease, task := start(f, "run-1")
		f.advance(lease, store.RunAdvanceParams{
			Completed: []store.TaskCompleteParams{result(task)},
			Finish:    &store.RunFinish{Status: store.RunCompleted, Output: json.RawMessage(`"done"`)},
		})
		got := f.last("run-1", 2)
		if got[0].Type != store.EventStepCompleted || got[1].Type != store.EventRunCompleted {
			t.Fatalf("history ends with %s", dump(got))
		}
		if run := f.get("run-1"); run.Status != store.RunCompleted {
			t.Fatalf("status %s, want completed", run.Status)
		}
	})

	t.Run("FinishDropsTheOtherTasks", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease := f.create("run-1")
		adv := f.advanced(lease, store.RunAdvanceParams{
			LeaseOwner: engine, LeaseTTL: minute,
			Steps: []store.StepSpec{leased(newStep(1, "charge")), leased(newStep(2, "ship"))},
		})
		f.advance(lease, store.RunAdvanceParams{
			Completed: []store.TaskCompleteParams{result(adv.Tasks[0])},
			Finish:    &store.RunFinish{Status: store.RunCompleted},
		})
		for _, task := range adv.Tasks {
			if _, err := f.store.TaskGet(t.Context(), task.ID); err == nil {
				t.Fatalf("task of position %d outlived its run", task.Position)
			}
		}
	})

	t.Run("StaleResultChangesNothing", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease, task := start(f, "run-1")
		stale := result(task)
		stale.Token++
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.RunAdvance(t.Context(), &store.RunAdvanceParams{
				RunID: lease.Run.ID, Token: lease.Token,
				Completed: []store.TaskCompleteParams{stale},
				Steps:     []store.StepSpec{newStep(2, "ship")},
			})
			return err
		})
		// A lapsed lease is as stale, even with the right token.
		f.clock.Advance(minute)
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.RunAdvance(t.Context(), &store.RunAdvanceParams{
				RunID: lease.Run.ID, Token: lease.Token, Completed: []store.TaskCompleteParams{result(task)},
			})
			return err
		})
		if _, err := f.store.TaskGet(t.Context(), task.ID); err != nil {
			t.Fatalf("the task went with a refused result: %v", err)
		}
	})
}
