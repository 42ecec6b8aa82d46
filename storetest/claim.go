package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"reprise/store"
)

func testTaskClaim(t *testing.T, open Open) {
	t.Run("FillsEveryFieldAndAppendsAttemptStarted", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		s := withTimeout(newStep(1, "charge"), 5*time.Minute)
		f.schedule("run-1", s)
		f.clock.Advance(time.Second)
		now := f.now()
		task := f.claimOne("charge")

		if task.ID == 0 || task.Token == 0 {
			t.Fatalf("ID = %d, Token = %d: want both set", task.ID, task.Token)
		}
		if task.RunID != "run-1" || task.Execution != 1 || task.Position != 1 || task.Step != "charge" ||
			task.IdempotencyKey != s.IdempotencyKey || task.Timeout != s.Timeout || task.Attempt != 1 {
			t.Fatalf("claimed %+v", task)
		}
		requireJSON(t, "Input", task.Input, s.Input)
		requireJSON(t, "Policy", task.Policy, s.Policy)
		requireTime(t, "LeaseUntil", task.LeaseUntil, now.Add(minute))
		requireTime(t, "StartedAt", task.StartedAt, now)
		requireTime(t, "FirstStartedAt", task.FirstStartedAt, now)
		requireEvents(t, f.last("run-1", 1), []store.Event{{
			Seq: 3, Type: store.EventAttemptStarted, At: now, Execution: 1,
			Position: 1, Step: "charge", Attempt: 1, Worker: worker,
			LeaseUntil: now.Add(minute), IdempotencyKey: s.IdempotencyKey,
		}})
	})

	t.Run("LeaseIsCutToTimeout", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1",
			withTimeout(newStep(1, "short"), 10*time.Second),
			withTimeout(newStep(2, "long"), 2*minute),
			newStep(3, "none"))
		for step, want := range map[string]time.Duration{"short": 10 * time.Second, "long": minute, "none": minute} {
			task := f.claimOne(step)
			requireTime(t, "LeaseUntil of "+step, task.LeaseUntil, start.Add(want))
		}
	})

	t.Run("ClaimsPerStepQuota", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", newStep(1, "charge"), newStep(2, "charge"), newStep(3, "charge"),
			newStep(4, "ship"), newStep(5, "ship"), newStep(6, "email"))
		tasks, err := f.store.TaskClaim(t.Context(), &store.TaskClaimParams{
			Owner:    worker,
			Steps:    []store.StepQuota{{Name: "charge", Limit: 2}, {Name: "ship", Limit: 5}, {Name: "missing", Limit: 3}},
			LeaseTTL: minute,
		})
		if err != nil {
			t.Fatalf("TaskClaim: %v", err)
		}
		var got []string
		for _, task := range tasks {
			got = append(got, fmt.Sprintf("%s/%d", task.Step, task.Position))
		}
		if want := []string{"charge/1", "charge/2", "ship/4", "ship/5"}; !slices.Equal(got, want) {
			t.Fatalf("claimed %v, want %v", got, want)
		}
		// AttemptStarted for each, in the order returned.
		for i, e := range f.last("run-1", 4) {
			if e.Type != store.EventAttemptStarted || e.Position != tasks[i].Position {
				t.Fatalf("event %d = %s, want AttemptStarted of position %d", i, dump([]store.Event{e}), tasks[i].Position)
			}
		}
		f.claimOne("charge")
		f.claimOne("email")
		f.claimNone("ship")
	})

	t.Run("LimitCapsTheTotalOldestFirst", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("early", newStep(1, "charge"), newStep(2, "charge"), newStep(3, "ship"), newStep(4, "ship"))
		f.clock.Advance(time.Second)
		f.schedule("late", newStep(5, "charge"), newStep(6, "ship"))
		f.clock.Advance(time.Second)

		claim := func(limit int, quotas ...store.StepQuota) []string {
			t.Helper()
			tasks, err := f.store.TaskClaim(t.Context(), &store.TaskClaimParams{
				Owner: worker, Steps: quotas, Limit: limit, LeaseTTL: minute,
			})
			if err != nil {
				t.Fatalf("TaskClaim: %v", err)
			}
			var got []string
			for _, task := range tasks {
				got = append(got, fmt.Sprintf("%s/%d", task.Step, task.Position))
			}
			return got
		}
		got := claim(3, store.StepQuota{Name: "charge", Limit: 2}, store.StepQuota{Name: "ship", Limit: 5})
		if want := []string{"charge/1", "charge/2", "ship/3"}; !slices.Equal(got, want) {
			t.Fatalf("Limit 3 claimed %v, want %v", got, want)
		}
		// Zero: the sum of the quotas. The oldest come first whatever the step.
		got = claim(0, store.StepQuota{Name: "charge", Limit: 5}, store.StepQuota{Name: "ship", Limit: 1})
		if want := []string{"ship/4", "charge/5"}; !slices.Equal(got, want) {
			t.Fatalf("Limit 0 claimed %v, want %v", got, want)
		}
		for i, e := range f.last("late", 1) {
			if e.Type != store.EventAttemptStarted || e.Position != 5 {
				t.Fatalf("late's event %d = %s, want AttemptStarted of position 5", i, dump([]store.Event{e}))
			}
		}
		f.claimOne("ship")
	})

	t.Run("OrdersByReadyTimeThenID", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		// early's task is scheduled first (lower id) but retried, so it
		// becomes ready after late's.
		f.schedule("early", newStep(1, "charge"))
		f.retry(f.claimOne("charge"), 10*time.Second)
		f.clock.Advance(time.Second)
		f.schedule("late", newStep(2, "charge"), newStep(1, "charge"))
		f.clock.Advance(time.Minute)

		var got []string
		for range 3 {
			task := f.claimOne("charge")
			got = append(got, fmt.Sprintf("%s/%d", task.RunID, task.Position))
		}
		if want := []string{"late/1", "late/2", "early/1"}; !slices.Equal(got, want) {
			t.Fatalf("claim order %v, want %v", got, want)
		}
	})

	t.Run("LeasedOrNotReadyTaskIsNotClaimed", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", newStep(1, "charge"))
		task := f.claimOne("charge")
		f.claimNone("charge")
		f.retry(task, time.Second)
		f.claimNone("charge")
	})

	t.Run("ConcurrentClaimsNeverShareATask", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		const runs, stepsPerRun, claimers = 5, 100, 8
		for r := range runs {
			steps := make([]store.StepSpec, stepsPerRun)
			for i := range steps {
				steps[i] = newStep(i+1, "charge")
			}
			f.schedule(fmt.Sprintf("run-%d", r), steps...)
		}

		// claimAll claims every ready task with concurrent claimers and
		// returns each task's claims.
		claimAll := func() map[int64][]*store.Task {
			var mu sync.Mutex
			claims := map[int64][]*store.Task{}
			var wg sync.WaitGroup
			for c := range claimers {
				wg.Go(func() {
					for {
						tasks, err := f.store.TaskClaim(t.Context(), &store.TaskClaimParams{
							Owner:    fmt.Sprintf("worker-%d", c),
							Steps:    []store.StepQuota{{Name: "charge", Limit: 7}},
							LeaseTTL: minute,
						})
						if err != nil {
							t.Errorf("TaskClaim: %v", err)
							return
						}
						if len(tasks) == 0 {
							return
						}
						mu.Lock()
						for _, task := range tasks {
							claims[task.ID] = append(claims[task.ID], task)
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			return claims
		}
		requireOnce := func(claims map[int64][]*store.Task, attempt int) {
			t.Helper()
			if len(claims) != runs*stepsPerRun {
				t.Fatalf("claimed %d distinct tasks, want %d", len(claims), runs*stepsPerRun)
			}
			for id, c := range claims {
				if len(c) != 1 || c[0].Attempt != attempt {
					t.Fatalf("task %d claimed %d times (attempt %d), want once as attempt %d", id, len(c), c[0].Attempt, attempt)
				}
			}
		}

		first := claimAll()
		requireOnce(first, 1)

		// Fail every attempt concurrently; all become ready again at once.
		var wg sync.WaitGroup
		tasks := make(chan *store.Task)
		for range claimers {
			wg.Go(func() {
				for task := range tasks {
					if _, err := f.store.TaskFail(t.Context(), retryParams(task, 0)); err != nil {
						t.Errorf("TaskFail(%d): %v", task.ID, err)
					}
				}
			})
		}
		for _, c := range first {
			tasks <- c[0]
		}
		close(tasks)
		wg.Wait()

		second := claimAll()
		requireOnce(second, 2)
		for id, c := range second {
			if c[0].Token == first[id][0].Token {
				t.Fatalf("task %d claimed again with its old token %d", id, c[0].Token)
			}
		}

		// Every run's history stayed gapless under the concurrent appends.
		for r := range runs {
			events := f.history(fmt.Sprintf("run-%d", r))
			if want := 1 + stepsPerRun*4; len(events) != want {
				t.Fatalf("run-%d has %d events, want %d", r, len(events), want)
			}
			for i, e := range events {
				if e.Seq != int64(i+1) {
					t.Fatalf("run-%d event %d has seq %d", r, i, e.Seq)
				}
			}
		}
	})
}
