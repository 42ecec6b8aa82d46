package storetest

import (
	"maps"
	"slices"
	"testing"
	"time"

	"reprise/store"
)

// testRunListFailing pins RunList's filters by a run's failing steps
// (Retrying, Step, ErrorType) and by its created time, StatsGet's counts,
// and the ready time a claim reports.
func testRunListFailing(t *testing.T, open Open) {
	f := setup(t, open)
	list := func(p store.RunListParams) []string {
		t.Helper()
		runs, err := f.store.RunList(t.Context(), &p)
		if err != nil {
			t.Fatalf("RunList(%+v): %v", p, err)
		}
		ids := make([]string, len(runs))
		for i, r := range runs {
			ids[i] = r.ID
		}
		return ids
	}
	requireList := func(p store.RunListParams, want ...string) {
		t.Helper()
		if got := list(p); !slices.Equal(got, want) {
			t.Fatalf("RunList(%+v) = %v, want %v", p, got, want)
		}
	}
	requireStats := func(retrying int, ready map[string]int) {
		t.Helper()
		stats, err := f.store.StatsGet(t.Context())
		if err != nil {
			t.Fatalf("StatsGet: %v", err)
		}
		if stats.Retrying != retrying || !maps.Equal(stats.Ready, ready) {
			t.Fatalf("StatsGet = %+v, want Retrying %d and Ready %v", *stats, retrying, ready)
		}
	}

	// a: its charge waits an hour for a retry after a NetworkError.
	f.schedule("a", newStep(1, "charge"))
	f.retry(f.claimOne("charge"), time.Hour)
	// b: its ship failed for good (Declined), and then the run.
	f.clock.Advance(time.Millisecond)
	b := f.schedule("b", newStep(1, "ship"))
	f.failAttempt(f.claimOne("ship"))
	f.failRun(b)
	// c: its charge waits for its first attempt.
	f.clock.Advance(time.Millisecond)
	scheduledC := f.now()
	f.schedule("c", newStep(1, "charge"))
	// d: its charge failed with a NetworkError and runs its retry.
	f.clock.Advance(time.Millisecond)
	f.schedule("d", newStep(1, "charge"))
	tasks := f.claim(worker, "charge", 2, minute)
	if len(tasks) != 2 || tasks[0].RunID != "c" || tasks[1].RunID != "d" {
		t.Fatalf("claimed %+v, want the charges of c and d", tasks)
	}
	requireTime(t, "ReadyAt of c's first attempt", tasks[0].ReadyAt, scheduledC)
	f.complete(tasks[0])
	f.schedule("c2", newStep(1, "charge")) // a fresh charge of c's kind, created with d
	f.retry(tasks[1], 0)
	retried := f.claimOne("charge")
	if retried.RunID != "d" {
		t.Fatalf("claimed %s's charge, want d's retry (ready first)", retried.RunID)
	}

	requireList(store.RunListParams{Retrying: true}, "a")
	requireList(store.RunListParams{Step: "charge"}, "d", "a")
	requireList(store.RunListParams{ErrorType: "NetworkError"}, "d", "a")
	requireList(store.RunListParams{ErrorType: "Declined"}, "b")
	requireList(store.RunListParams{Step: "ship", Status: store.RunFailed}, "b")
	requireList(store.RunListParams{Step: "charge", ErrorType: "Declined"})
	requireList(store.RunListParams{Retrying: true, Step: "ship"})
	requireList(store.RunListParams{Retrying: true, Workflow: "none"})
	requireList(store.RunListParams{Step: "charge", Limit: 1}, "d")
	requireList(store.RunListParams{Step: "charge", Before: "d"}, "a")
	requireList(store.RunListParams{CreatedSince: start.Add(time.Millisecond)}, "d", "c2", "c", "b")
	requireList(store.RunListParams{CreatedUntil: start.Add(2 * time.Millisecond)}, "b", "a")
	requireList(store.RunListParams{CreatedSince: start.Add(time.Millisecond), CreatedUntil: start.Add(2 * time.Millisecond)}, "b")
	// Times far from now bound nothing (a store that counts time in
	// nanoseconds must not wrap around past 1678 or 2262).
	ancient, distant := time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC), time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	requireList(store.RunListParams{CreatedSince: ancient, CreatedUntil: distant}, "d", "c2", "c", "b", "a")
	requireList(store.RunListParams{CreatedSince: distant})
	requireList(store.RunListParams{CreatedUntil: ancient})
	requireStats(1, map[string]int{"charge": 1})

	// a's retry comes due: it waits, unclaimed, and is still retrying.
	f.clock.Advance(time.Hour)
	requireList(store.RunListParams{Retrying: true}, "a")
	requireStats(1, map[string]int{"charge": 2})
	// Claimed, it runs; its step is still failing until it completes.
	var next *store.Task
	for _, task := range f.claim(worker, "charge", 2, minute) {
		if task.RunID == "a" {
			next = task
		}
	}
	if next == nil {
		t.Fatal("a's retry was not claimed")
	}
	requireTime(t, "ReadyAt of a's retry", next.ReadyAt, start.Add(time.Hour))
	requireList(store.RunListParams{Retrying: true})
	requireList(store.RunListParams{Step: "charge"}, "d", "a")
	requireStats(0, map[string]int{})
	f.complete(next)
	requireList(store.RunListParams{Step: "charge"}, "d")

	// A redrive makes b's step ready again, fresh: no longer failing.
	if _, err := f.store.RunRedrive(t.Context(), &store.RunRedriveParams{ID: "b", By: "operator"}); err != nil {
		t.Fatalf("RunRedrive(b): %v", err)
	}
	requireList(store.RunListParams{Step: "ship"})
	requireStats(0, map[string]int{"ship": 1})
}
