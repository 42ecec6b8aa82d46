package postgres_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"reprise/postgres"
	"reprise/store"
)

// openPools opens n stores, each with a pool of its own, on one schema, as
// n engine processes would.
func openPools(t *testing.T, n int) []*postgres.Store {
	t.Helper()
	dsn, schema := testSchema(t)
	stores := make([]*postgres.Store, n)
	var wg sync.WaitGroup
	for i := range stores {
		wg.Go(func() { stores[i] = openOn(t, dsn, &postgres.Options{Schema: schema, MaxConns: 4}) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return stores
}

// TestClaimRace has claimers on separate pools race for the same tasks and
// runs: every task is claimed and completed exactly once, and every run is
// claimed by exactly one of them.
func TestClaimRace(t *testing.T) {
	t.Parallel()
	stores := openPools(t, 4)
	ctx := t.Context()
	const (
		runs  = 20
		steps = 15
	)
	for r := range runs {
		id := fmt.Sprintf("run-%02d", r)
		lease, _, err := stores[0].RunCreate(ctx, &store.RunCreateParams{ID: id, Workflow: "wf", Owner: "e0", LeaseTTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		specs := make([]store.StepSpec, steps)
		for i := range specs {
			specs[i] = store.StepSpec{Position: i + 1, Name: "s", IdempotencyKey: fmt.Sprintf("%s-%d", id, i)}
		}
		if _, err := stores[0].RunAdvance(ctx, &store.RunAdvanceParams{RunID: id, Token: lease.Token, Steps: specs}); err != nil {
			t.Fatal(err)
		}
	}

	var (
		mu        sync.Mutex
		completed = map[int64]string{}
		dup       []string
	)
	deadline := time.Now().Add(30 * time.Second)
	var wg sync.WaitGroup
	for i, s := range stores {
		for j := range 2 {
			owner := fmt.Sprintf("w%d-%d", i, j)
			wg.Go(func() {
				for time.Now().Before(deadline) {
					mu.Lock()
					done := len(completed) == runs*steps
					mu.Unlock()
					if done {
						return
					}
					tasks, err := s.TaskClaim(ctx, &store.TaskClaimParams{
						Owner: owner, Steps: []store.StepQuota{{Name: "s", Limit: 7}}, LeaseTTL: time.Hour,
					})
					if err != nil {
						t.Error(err)
						return
					}
					for _, task := range tasks {
						if _, err := s.TaskComplete(ctx, &store.TaskCompleteParams{TaskID: task.ID, Token: task.Token}); err != nil {
							t.Errorf("complete task %d claimed by %s: %v", task.ID, owner, err)
							continue
						}
						mu.Lock()
						if prev, ok := completed[task.ID]; ok {
							dup = append(dup, fmt.Sprintf("task %d by %s and %s", task.ID, prev, owner))
						}
						completed[task.ID] = owner
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	if len(dup) > 0 {
		t.Errorf("claimed twice: %v", dup)
	}
	if len(completed) != runs*steps {
		t.Fatalf("completed %d tasks, want %d", len(completed), runs*steps)
	}
	for r := range runs {
		history, err := stores[1].HistoryList(ctx, &store.HistoryListParams{RunID: fmt.Sprintf("run-%02d", r)})
		if err != nil {
			t.Fatal(err)
		}
		count := map[store.EventType]int{}
		for i, e := range history {
			count[e.Type]++
			if e.Seq != int64(i+1) {
				t.Fatalf("run %d: event %d has seq %d", r, i, e.Seq)
			}
		}
		if count[store.EventAttemptStarted] != steps || count[store.EventStepCompleted] != steps {
			t.Errorf("run %d: %v", r, count)
		}
	}

	// Runs nobody owns: each is claimed by one of the racing engines.
	const free = 50
	for r := range free {
		if _, _, err := stores[0].RunCreate(ctx, &store.RunCreateParams{ID: fmt.Sprintf("free-%02d", r), Workflow: "wf"}); err != nil {
			t.Fatal(err)
		}
	}
	owners := make(map[string]string)
	for i, s := range stores {
		wg.Go(func() {
			for {
				leases, err := s.RunClaim(ctx, &store.RunClaimParams{Owner: fmt.Sprintf("e%d", i), Limit: 3, LeaseTTL: time.Hour})
				if err != nil {
					t.Error(err)
					return
				}
				if len(leases) == 0 {
					return
				}
				mu.Lock()
				for _, l := range leases {
					if prev, ok := owners[l.Run.ID]; ok {
						t.Errorf("run %s claimed by e%d and %s", l.Run.ID, i, prev)
					}
					owners[l.Run.ID] = fmt.Sprintf("e%d", i)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// A claimer may stop early when the rows it saw were all taken; what
	// is left is claimed now.
	rest, err := stores[0].RunClaim(ctx, &store.RunClaimParams{Owner: "last", Limit: free, LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range rest {
		if prev, ok := owners[l.Run.ID]; ok {
			t.Errorf("run %s claimed by last and %s", l.Run.ID, prev)
		}
		owners[l.Run.ID] = "last"
	}
	if len(owners) != free {
		t.Errorf("%d runs claimed, want %d", len(owners), free)
	}
}

// TestRunClaimReadsTheBacklogInOrder checks that RunClaim's plan reads the
// unowned runs from their partial index in order and stops at the limit,
// also on a backlog that the table's statistics do not know of yet (runs
// created faster than autovacuum analyzes them), where the planner's
// guesses favoured reading them all and sorting them. That plan, a bitmap
// scan, sorted the whole backlog for every claim (55 ms a claim with
// 60,000 runs waiting) and was kept until the next ANALYZE.
func TestRunClaimReadsTheBacklogInOrder(t *testing.T) {
	t.Parallel()
	dsn, schema := testSchema(t)
	s := openOn(t, dsn, &postgres.Options{Schema: schema})
	if _, err := connect(t, dsn).Exec(t.Context(), `
		INSERT INTO `+schema+`.reprise_run (id, workflow, status, input, created_at, updated_at)
		SELECT 'run-' || i, 'wf', 'pending', json_build_object('pad', repeat('x', 200)),
			now() + i * interval '1 microsecond', now()
		FROM generate_series(1, 60000) i`); err != nil {
		t.Fatal(err)
	}
	plan, err := postgres.ClaimPlan(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	// The one sort allowed is of the two candidate lists, after their
	// limits.
	if strings.Contains(plan, "Bitmap") || strings.Count(plan, "Sort Key") > 1 {
		t.Errorf("RunClaim's plan reads the backlog whole to sort it:\n%s", plan)
	}
}
