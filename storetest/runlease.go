package storetest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"reprise/store"
)

func (f *fixture) runClaim(owner string, limit int, workflows ...string) []store.RunLease {
	f.t.Helper()
	leases, err := f.store.RunClaim(f.t.Context(), &store.RunClaimParams{
		Owner: owner, Workflows: workflows, Limit: limit, LeaseTTL: minute,
	})
	if err != nil {
		f.t.Fatalf("RunClaim: %v", err)
	}
	return leases
}

func leaseIDs(leases []store.RunLease) []string {
	ids := make([]string, len(leases))
	for i, l := range leases {
		ids[i] = l.Run.ID
	}
	return ids
}

func testRunClaim(t *testing.T, open Open) {
	createUnowned := func(f *fixture, workflow, id string) {
		f.t.Helper()
		_, _, err := f.store.RunCreate(f.t.Context(), &store.RunCreateParams{
			ID: id, Workflow: workflow, Input: json.RawMessage(`{}`),
		})
		if err != nil {
			f.t.Fatalf("RunCreate(%s): %v", id, err)
		}
	}

	t.Run("ClaimsUnownedRunsOldestFirst", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		for _, id := range []string{"c", "a", "b"} {
			createUnowned(f, "order", id)
			f.clock.Advance(time.Millisecond)
		}
		got := f.runClaim(engine, 2)
		if ids := leaseIDs(got); !slices.Equal(ids, []string{"c", "a"}) {
			t.Fatalf("claimed %v, want [c a]", ids)
		}
		for _, l := range got {
			if l.Token == 0 {
				t.Fatalf("run %s claimed with token 0", l.Run.ID)
			}
			// A claimed run is running, and so is its row.
			if l.Run.Workflow != "order" || l.Run.Status != store.RunRunning || l.Run.Execution != 1 {
				t.Fatalf("claimed run = %+v", l.Run)
			}
			if stored := f.get(l.Run.ID); stored.Status != store.RunRunning {
				t.Fatalf("claimed run %s is stored %s, want running", l.Run.ID, stored.Status)
			}
		}
		if ids := leaseIDs(f.runClaim(engine2, 10)); !slices.Equal(ids, []string{"b"}) {
			t.Fatalf("second claim got %v, want [b]", ids)
		}
		if ids := leaseIDs(f.runClaim(engine2, 10)); len(ids) != 0 {
			t.Fatalf("third claim got %v, want none", ids)
		}
		// The claimed token advances the run.
		f.advance(got[0], store.RunAdvanceParams{})
	})

	t.Run("SaysHowLongEachHistoryIs", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		createUnowned(f, "order", "fresh")
		f.clock.Advance(time.Millisecond)
		// A run whose owner scheduled a step and then lost its lease.
		lease := f.create("busy")
		f.advance(lease, store.RunAdvanceParams{Steps: []store.StepSpec{{Position: 1, Name: "charge"}}})
		f.clock.Advance(minute)
		got := f.runClaim(engine2, 10)
		seqs := map[string]int64{}
		for _, l := range got {
			seqs[l.Run.ID] = l.LastSeq
		}
		want := map[string]int64{"fresh": 1, "busy": f.history("busy")[len(f.history("busy"))-1].Seq}
		if !reflect.DeepEqual(seqs, want) {
			t.Fatalf("LastSeq by run = %v, want %v", seqs, want)
		}
	})

	t.Run("FiltersWorkflows", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		createUnowned(f, "order", "o1")
		createUnowned(f, "refund", "r1")
		createUnowned(f, "audit", "a1")
		if ids := leaseIDs(f.runClaim(engine, 10, "refund", "audit")); !slices.Equal(sorted(ids), []string{"a1", "r1"}) {
			t.Fatalf("claimed %v, want [a1 r1]", ids)
		}
		if ids := leaseIDs(f.runClaim(engine, 10, "refund")); len(ids) != 0 {
			t.Fatalf("claimed %v, want none", ids)
		}
		if ids := leaseIDs(f.runClaim(engine, 10)); !slices.Equal(ids, []string{"o1"}) {
			t.Fatalf("claimed %v, want [o1]", ids)
		}
	})

	t.Run("LapsedLeaseIsClaimedWithNewToken", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		old := f.create("run-1")
		f.clock.Advance(minute - time.Microsecond)
		if got := f.runClaim(engine2, 10); len(got) != 0 {
			t.Fatalf("claimed a live lease: %v", leaseIDs(got))
		}
		f.clock.Advance(time.Microsecond) // lease_until <= now: lapsed
		got := f.runClaim(engine2, 10)
		if len(got) != 1 || got[0].Run.ID != "run-1" {
			t.Fatalf("claimed %v, want [run-1]", leaseIDs(got))
		}
		if got[0].Token == old.Token {
			t.Fatalf("reclaimed with the old token %d", old.Token)
		}
		// The old holder is fenced off; the new one advances.
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.RunAdvance(t.Context(), &store.RunAdvanceParams{
				RunID: "run-1", Token: old.Token, Steps: []store.StepSpec{newStep(1, "charge")},
			})
			return err
		})
		f.advance(got[0], store.RunAdvanceParams{Steps: []store.StepSpec{newStep(1, "charge")}})

		// A third claim after that lease lapses gets yet another token.
		f.clock.Advance(minute)
		again := f.runClaim(engine, 10)
		if len(again) != 1 || again[0].Token == got[0].Token || again[0].Token == old.Token {
			t.Fatalf("third claim = %+v, want a token unlike %d and %d", again, old.Token, got[0].Token)
		}
		if again[0].Run.Status != store.RunRunning {
			t.Fatalf("claimed run status = %s, want running", again[0].Run.Status)
		}
	})

	t.Run("SkipsFinishedRuns", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		for i, status := range []store.RunStatus{store.RunCompleted, store.RunFailed, store.RunCancelled} {
			lease := f.create(fmt.Sprintf("run-%d", i))
			f.advance(lease, store.RunAdvanceParams{Finish: &store.RunFinish{Status: status}})
		}
		f.clock.Advance(2 * minute)
		if got := f.runClaim(engine2, 10); len(got) != 0 {
			t.Fatalf("claimed finished runs: %v", leaseIDs(got))
		}
	})

	t.Run("ConcurrentClaimsNeverShareARun", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		const runs, claimers = 200, 8
		for i := range runs {
			createUnowned(f, "order", fmt.Sprintf("run-%03d", i))
		}
		var mu sync.Mutex
		seen := map[string]int{}
		var wg sync.WaitGroup
		for c := range claimers {
			wg.Go(func() {
				for {
					leases, err := f.store.RunClaim(t.Context(), &store.RunClaimParams{
						Owner: fmt.Sprintf("engine-%d", c), Limit: 3, LeaseTTL: minute,
					})
					if err != nil {
						t.Errorf("RunClaim: %v", err)
						return
					}
					if len(leases) == 0 {
						return
					}
					mu.Lock()
					for _, l := range leases {
						seen[l.Run.ID]++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(seen) != runs {
			t.Fatalf("claimed %d distinct runs, want %d", len(seen), runs)
		}
		for id, n := range seen {
			if n != 1 {
				t.Fatalf("run %s claimed %d times", id, n)
			}
		}
	})
}

func testRunRenew(t *testing.T, open Open) {
	t.Run("ExtendsTheOwnersLeases", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		mine := f.create("mine")
		_, _, err := f.store.RunCreate(t.Context(), &store.RunCreateParams{
			ID: "theirs", Workflow: "order", Input: json.RawMessage(`{}`), Owner: engine2, LeaseTTL: minute,
		})
		if err != nil {
			t.Fatalf("RunCreate: %v", err)
		}
		f.clock.Advance(50 * time.Second)
		err = f.store.RunRenew(t.Context(), &store.RunRenewParams{Owner: engine, LeaseTTL: minute})
		if err != nil {
			t.Fatalf("RunRenew: %v", err)
		}
		f.clock.Advance(10 * time.Second) // the first lease would have lapsed
		if got := leaseIDs(f.runClaim("engine-3", 10)); !slices.Equal(got, []string{"theirs"}) {
			t.Fatalf("claimed %v, want only [theirs]", got)
		}
		f.clock.Advance(50*time.Second - time.Microsecond)
		if got := f.runClaim("engine-3", 10); len(got) != 0 {
			t.Fatalf("claimed %v before the renewed lease lapsed", leaseIDs(got))
		}
		f.clock.Advance(time.Microsecond)
		got := f.runClaim("engine-3", 10)
		if !slices.Equal(leaseIDs(got), []string{"mine"}) || got[0].Token == mine.Token {
			t.Fatalf("claimed %+v after the renewed lease lapsed, want mine with a new token", got)
		}
	})

	t.Run("RefusesANonPositiveTTL", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease := f.create("run-1")
		for _, ttl := range []time.Duration{0, -time.Second} {
			err := f.store.RunRenew(t.Context(), &store.RunRenewParams{Owner: engine, LeaseTTL: ttl})
			if err == nil {
				t.Fatalf("RunRenew with LeaseTTL %v: no error, want one (RunRelease releases)", ttl)
			}
		}
		// The lease is held still, as it was: not released, not cut short.
		if got := f.runClaim(engine2, 10); len(got) != 0 {
			t.Fatalf("claimed %v after a refused renewal", leaseIDs(got))
		}
		f.clock.Advance(minute)
		got := f.runClaim(engine2, 10)
		if !slices.Equal(leaseIDs(got), []string{"run-1"}) || got[0].Token == lease.Token {
			t.Fatalf("claimed %+v once the lease lapsed, want run-1 with a new token", got)
		}
	})
}

func testRunRelease(t *testing.T, open Open) {
	t.Run("ReleasesRuns", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease := f.schedule("run-1", newStep(1, "charge"))
		task := f.claimOne("charge")
		err := f.store.RunRelease(t.Context(), &store.RunReleaseParams{Owner: engine})
		if err != nil {
			t.Fatalf("RunRelease: %v", err)
		}
		if out := f.complete(task); out.Owner != "" {
			t.Fatalf("Outcome.Owner = %q after release, want none", out.Owner)
		}
		got := f.runClaim(engine2, 10)
		if !slices.Equal(leaseIDs(got), []string{"run-1"}) || got[0].Token == lease.Token {
			t.Fatalf("claimed %+v after release, want run-1 with a new token", got)
		}
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.RunAdvance(t.Context(), &store.RunAdvanceParams{RunID: "run-1", Token: lease.Token})
			return err
		})
	})
}
