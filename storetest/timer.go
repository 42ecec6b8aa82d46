package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"reprise/store"
)

func testTimerFire(t *testing.T, open Open) {
	fire := func(f *fixture, limit int) []*store.Outcome {
		f.t.Helper()
		outcomes, err := f.store.TimerFire(f.t.Context(), &store.TimerFireParams{Limit: limit})
		if err != nil {
			f.t.Fatalf("TimerFire: %v", err)
		}
		return outcomes
	}

	t.Run("FiresDueTimersOnceWithOneOutcomePerRun", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		owned := f.create("owned")
		f.advance(owned, store.RunAdvanceParams{Timers: []store.TimerSpec{
			{Position: 1, Delay: 20 * time.Second},
			{Position: 2, Delay: 10 * time.Second},
			{Position: 3, Delay: 10 * time.Second},
		}})
		free, _, err := f.store.RunCreate(t.Context(), &store.RunCreateParams{ID: "free", Workflow: "order", Input: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatalf("RunCreate: %v", err)
		}
		f.advance(free, store.RunAdvanceParams{Timers: []store.TimerSpec{{Position: 1, Delay: 15 * time.Second}}})

		f.clock.Advance(10*time.Second - time.Microsecond)
		if got := fire(f, 10); len(got) != 0 {
			t.Fatalf("fired %d outcomes early", len(got))
		}
		f.clock.Advance(time.Microsecond) // fire_at <= now: due
		at := f.now()
		got := fire(f, 10)
		if len(got) != 1 || got[0].RunID != "owned" || got[0].Owner != engine {
			t.Fatalf("outcomes = %+v, want one for owned, owned by %s", got, engine)
		}
		want := []store.Event{
			{Seq: 5, Type: store.EventTimerFired, At: at, Execution: 1, Position: 2},
			{Seq: 6, Type: store.EventTimerFired, At: at, Execution: 1, Position: 3},
		}
		requireEvents(t, got[0].Events, want)
		requireEvents(t, f.last("owned", 2), want)
		if again := fire(f, 10); len(again) != 0 {
			t.Fatalf("timers fired twice: %+v", again)
		}

		f.clock.Advance(10 * time.Second)
		at = f.now()
		got = fire(f, 10)
		if len(got) != 2 {
			t.Fatalf("got %d outcomes, want 2", len(got))
		}
		byRun := map[string]*store.Outcome{got[0].RunID: got[0], got[1].RunID: got[1]}
		if o := byRun["free"]; o == nil || o.Owner != "" {
			t.Fatalf("outcome for free = %+v, want one with no owner", o)
		}
		requireEvents(t, byRun["free"].Events, []store.Event{{Seq: 3, Type: store.EventTimerFired, At: at, Execution: 1, Position: 1}})
		requireEvents(t, byRun["owned"].Events, []store.Event{{Seq: 7, Type: store.EventTimerFired, At: at, Execution: 1, Position: 1}})
	})

	t.Run("Limit", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease := f.create("run-1")
		f.advance(lease, store.RunAdvanceParams{Timers: []store.TimerSpec{
			{Position: 1, Delay: time.Second}, {Position: 2, Delay: 2 * time.Second}, {Position: 3, Delay: 3 * time.Second},
		}})
		f.clock.Advance(time.Hour)
		got := fire(f, 2)
		if len(got) != 1 || len(got[0].Events) != 2 || got[0].Events[0].Position != 1 || got[0].Events[1].Position != 2 {
			t.Fatalf("Limit 2 fired %+v, want positions 1 and 2 (earliest first)", got)
		}
		got = fire(f, 2)
		if len(got) != 1 || len(got[0].Events) != 1 || got[0].Events[0].Position != 3 {
			t.Fatalf("second fire = %+v, want position 3", got)
		}
	})
}

// requireWake requires NextWake for steps to be want.
func requireWake(f *fixture, steps []string, want store.Wake) {
	f.t.Helper()
	got, err := f.store.NextWake(f.t.Context(), &store.NextWakeParams{Steps: steps})
	if err != nil {
		f.t.Fatalf("NextWake: %v", err)
	}
	requireTime(f.t, "Wake.Task", got.Task, want.Task)
	requireTime(f.t, "Wake.Lease", got.Lease, want.Lease)
	requireTime(f.t, "Wake.Timer", got.Timer, want.Timer)
}

func testNextWake(t *testing.T, open Open) {
	t.Run("NothingPending", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)
		requireWake(f, nil, store.Wake{})
		f.create("run-1")
		requireWake(f, []string{"charge"}, store.Wake{})
	})

	t.Run("EachKind", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		a := f.schedule("a", newStep(1, "charge"), newStep(2, "ship"))
		f.clock.Advance(time.Second)
		f.schedule("b", newStep(1, "ship"))
		f.advance(a, store.RunAdvanceParams{Timers: []store.TimerSpec{{Position: 3, Delay: time.Hour}, {Position: 4, Delay: 2 * time.Hour}}})
		fireAt := start.Add(time.Second + time.Hour)

		requireWake(f, nil, store.Wake{Task: start, Timer: fireAt})
		requireWake(f, []string{"ship"}, store.Wake{Task: start, Timer: fireAt})
		requireWake(f, []string{"email"}, store.Wake{Timer: fireAt})
		requireWake(f, []string{}, store.Wake{Timer: fireAt}) // no step: no task

		// Leased tasks no longer count as ready; their leases do.
		f.clock.Advance(time.Second)
		f.claimOne("charge") // lease until start+2s+1m
		requireWake(f, []string{"charge"}, store.Wake{Lease: start.Add(2*time.Second + minute), Timer: fireAt})
		requireWake(f, nil, store.Wake{Task: start, Lease: start.Add(2*time.Second + minute), Timer: fireAt})
		ship := f.claim(worker, "ship", 1, 30*time.Second)[0] // a's, ready first
		requireWake(f, []string{"ship", "charge"}, store.Wake{Task: start.Add(time.Second), Lease: start.Add(32 * time.Second), Timer: fireAt})

		// A retry is ready at its retry time.
		f.claimOne("ship") // b's
		f.retry(ship, time.Hour)
		requireWake(f, []string{"ship"}, store.Wake{Task: start.Add(2*time.Second + time.Hour), Lease: start.Add(2*time.Second + minute), Timer: fireAt})
	})
}
