package storetest

import (
	"testing"
	"time"

	"reprise/store"
)

// testTaskListWaiting pins the read of the steps that wait for a worker:
// ready tasks no one holds, ready for at least ReadyFor, oldest first,
// of one run or of all.
func testTaskListWaiting(t *testing.T, open Open) {
	t.Run("ReadyUnclaimedOldestFirst", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", newStep(1, "reserve"), newStep(2, "charge"))
		first := f.now()
		f.clock.Advance(10 * time.Second)
		f.schedule("run-2", newStep(1, "ship"))
		second := f.now()
		all := []store.WaitingTask{
			{RunID: "run-1", Position: 1, Step: "reserve", ReadyAt: first},
			{RunID: "run-1", Position: 2, Step: "charge", ReadyAt: first},
			{RunID: "run-2", Position: 1, Step: "ship", ReadyAt: second},
		}
		f.requireWaiting(&store.TaskListWaitingParams{}, all...)
		f.requireWaiting(&store.TaskListWaitingParams{Limit: 2}, all[:2]...)
		f.requireWaiting(&store.TaskListWaitingParams{ReadyFor: 10 * time.Second}, all[:2]...)
		f.requireWaiting(&store.TaskListWaitingParams{ReadyFor: 10*time.Second + time.Microsecond})
		f.requireWaiting(&store.TaskListWaitingParams{RunID: "run-2"}, all[2])
		f.requireWaiting(&store.TaskListWaitingParams{RunID: "run-1", Limit: 1}, all[0])
		f.requireWaiting(&store.TaskListWaitingParams{RunID: "run-2", ReadyFor: time.Second})
		f.requireWaiting(&store.TaskListWaitingParams{RunID: "none"})
	})

	t.Run("HeldOrNotYetReadyIsNotWaiting", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		// Leased as scheduled, claimed, a lease lapsed but not reaped, and
		// a retry whose backoff runs: none waits for a worker.
		lease := f.create("run-1")
		f.advanced(lease, store.RunAdvanceParams{LeaseOwner: engine, LeaseTTL: minute,
			Steps: []store.StepSpec{leased(newStep(1, "reserve")), newStep(2, "charge"), newStep(3, "ship")}})
		f.advance(lease, store.RunAdvanceParams{Timers: []store.TimerSpec{{Position: 4, Delay: time.Second}}})
		f.claim(worker, "charge", 1, time.Second)
		f.retry(f.claimOne("ship"), time.Hour)
		f.clock.Advance(2 * time.Second)
		f.requireWaiting(&store.TaskListWaitingParams{})

		// The retry comes due: it waits from then on.
		f.clock.Advance(time.Hour)
		retryAt := start.Add(time.Hour)
		f.requireWaiting(&store.TaskListWaitingParams{RunID: "run-1"},
			store.WaitingTask{RunID: "run-1", Position: 3, Step: "ship", ReadyAt: retryAt})
		f.requireWaiting(&store.TaskListWaitingParams{ReadyFor: 2 * time.Second},
			store.WaitingTask{RunID: "run-1", Position: 3, Step: "ship", ReadyAt: retryAt})

		// A finished run's tasks are gone.
		f.advance(lease, store.RunAdvanceParams{Finish: &store.RunFinish{Status: store.RunCompleted}})
		f.requireWaiting(&store.TaskListWaitingParams{})
	})
}

// requireWaiting requires that TaskListWaiting lists want, in order; task
// ids are checked for being set and distinct, not compared.
func (f *fixture) requireWaiting(p *store.TaskListWaitingParams, want ...store.WaitingTask) {
	f.t.Helper()
	got, err := f.store.TaskListWaiting(f.t.Context(), p)
	if err != nil {
		f.t.Fatalf("TaskListWaiting(%+v): %v", *p, err)
	}
	ids := map[int64]bool{}
	for i := range got {
		if got[i].TaskID == 0 || ids[got[i].TaskID] {
			f.t.Fatalf("TaskListWaiting(%+v): task id %d is zero or repeated: %+v", *p, got[i].TaskID, got)
		}
		ids[got[i].TaskID] = true
		got[i].TaskID = 0
		got[i].ReadyAt = normTime(got[i].ReadyAt)
	}
	for i := range want {
		want[i].ReadyAt = normTime(want[i].ReadyAt)
	}
	if len(got) != len(want) {
		f.t.Fatalf("TaskListWaiting(%+v) = %+v, want %+v", *p, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			f.t.Fatalf("TaskListWaiting(%+v) = %+v, want %+v", *p, got, want)
		}
	}
}
