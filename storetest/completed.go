package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"reprise"
)

func testRunAdvanceCompleted(t *testing.T, open Open) {
	// start creates a run whose first step is leased to engine.
	start := func(f *fixture, id string) (reprise.RunLease, *reprise.Task) {
		lease := f.create(id)
		adv := f.advanced(lease, reprise.RunAdvanceParams{
			LeaseOwner: engine, LeaseTTL: minute, Steps: []reprise.StepSpec{leased(newStep(1, "charge"))},
		})
		if len(adv.Tasks) != 1 {
			f.t.Fatalf("leased %d tasks, want 1", len(adv.Tasks))
		}
		return lease, adv.Tasks[0]
	}
	result := func(task *reprise.Task) reprise.TaskCompleteParams {
		return reprise.TaskCompleteParams{TaskID: task.ID, Token: task.Token, Output: json.RawMessage(`"paid"`)}
	}

	t.Run("RecordsWhatTaskCompleteThenAdvanceWould", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		twoLease, twoTask := start(f, "two")
		f.clock.Advance(time.Second)
		if _, err := f.store.TaskComplete(t.Context(), &reprise.TaskCompleteParams{
			TaskID: twoTask.ID, Token: twoTask.Token, Output: json.RawMessage(`"paid"`),
		}); err != nil {
			t.Fatal(err)
		}
		f.advance(twoLease, reprise.RunAdvanceParams{Steps: []reprise.StepSpec{newStep(2, "ship")}})

		f.clock.Advance(-time.Second)
		oneLease, oneTask := start(f, "one")
		f.clock.Advance(time.Second)
		events := f.advance(oneLease, reprise.RunAdvanceParams{
			Completed: []reprise.TaskCompleteParams{result(oneTask)},
			Steps:     []reprise.StepSpec{newStep(2, "ship")},
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
		_, err := f.store.TaskComplete(t.Context(), &reprise.TaskCompleteParams{TaskID: oneTask.ID, Token: oneTask.Token})
		requireErr(t, err, reprise.ErrLeaseLost)
	})

	t.Run("WithFinish", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease, task := start(f, "run-1")
		f.advance(lease, reprise.RunAdvanceParams{
			Completed: []reprise.TaskCompleteParams{result(task)},
			Finish:    &reprise.RunFinish{Status: reprise.RunCompleted, Output: json.RawMessage(`"done"`)},
		})
		got := f.last("run-1", 2)
		if got[0].Type != reprise.EventStepCompleted || got[1].Type != reprise.EventRunCompleted {
			t.Fatalf("history ends with %s", dump(got))
		}
		if run := f.get("run-1"); run.Status != reprise.RunCompleted {
			t.Fatalf("status %s, want completed", run.Status)
		}
	})

	t.Run("FinishDropsTheOtherTasks", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease := f.create("run-1")
		adv := f.advanced(lease, reprise.RunAdvanceParams{
			LeaseOwner: engine, LeaseTTL: minute,
			Steps: []reprise.StepSpec{leased(newStep(1, "charge")), leased(newStep(2, "ship"))},
		})
		f.advance(lease, reprise.RunAdvanceParams{
			Completed: []reprise.TaskCompleteParams{result(adv.Tasks[0])},
			Finish:    &reprise.RunFinish{Status: reprise.RunCompleted},
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
		f.requireChangedNothing("run-1", reprise.ErrLeaseLost, func() error {
			_, err := f.store.RunAdvance(t.Context(), &reprise.RunAdvanceParams{
				RunID: lease.Run.ID, Token: lease.Token,
				Completed: []reprise.TaskCompleteParams{stale},
				Steps:     []reprise.StepSpec{newStep(2, "ship")},
			})
			return err
		})
		// A lapsed lease is as stale, even with the right token.
		f.clock.Advance(minute)
		f.requireChangedNothing("run-1", reprise.ErrLeaseLost, func() error {
			_, err := f.store.RunAdvance(t.Context(), &reprise.RunAdvanceParams{
				RunID: lease.Run.ID, Token: lease.Token, Completed: []reprise.TaskCompleteParams{result(task)},
			})
			return err
		})
		if _, err := f.store.TaskGet(t.Context(), task.ID); err != nil {
			t.Fatalf("the task went with a refused result: %v", err)
		}
	})
}
