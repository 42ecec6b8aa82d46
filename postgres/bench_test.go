package postgres_test

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"reprise/postgres"
	"reprise/store"
)

// BenchmarkStore runs whole store cycles in parallel (8 goroutines per
// CPU) on the database clock: create a run, schedule one step, claim it,
// fail it failures times with a zero backoff, claim and complete it, finish
// the run. It reports runs/s, attempts/s and transactions/s.
//
//	REPRISE_TEST_POSTGRES=postgres://... go test -run '^$' -bench Store ./postgres
func BenchmarkStore(b *testing.B) {
	b.Run("ok", func(b *testing.B) { benchmarkStore(b, 0) })
	b.Run("fail_twice", func(b *testing.B) { benchmarkStore(b, 2) })
}

func benchmarkStore(b *testing.B, failures int) {
	dsn, schema := testSchema(b)
	s := openOn(b, dsn, &postgres.Options{Schema: schema, MaxConns: 32})
	ctx := b.Context()
	var goroutines atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		g := goroutines.Add(1)
		owner := fmt.Sprintf("engine-%d", g)
		step := fmt.Sprintf("step-%d", g) // each goroutine claims its own steps
		claim := func() *store.Task {
			tasks, err := s.TaskClaim(ctx, &store.TaskClaimParams{Owner: owner, Steps: []store.StepQuota{{Name: step, Limit: 1}}, LeaseTTL: time.Minute})
			if err != nil || len(tasks) != 1 {
				b.Fatalf("claim: %v, %d tasks", err, len(tasks))
			}
			return tasks[0]
		}
		for i := 0; pb.Next(); i++ {
			id := fmt.Sprintf("%s-%d", owner, i)
			lease, _, err := s.RunCreate(ctx, &store.RunCreateParams{
				ID: id, Workflow: "bench", Input: json.RawMessage(`{"n":1}`), Owner: owner, LeaseTTL: time.Minute,
			})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.RunAdvance(ctx, &store.RunAdvanceParams{RunID: id, Token: lease.Token, Steps: []store.StepSpec{{
				Position: 1, Name: step, Input: json.RawMessage(`{"n":1}`), IdempotencyKey: id + "/1",
				PolicyText: "[retry: 3]", Policy: json.RawMessage(`{}`),
			}}}); err != nil {
				b.Fatal(err)
			}
			for range failures {
				task := claim()
				if _, err := s.TaskFail(ctx, &store.TaskFailParams{TaskID: task.ID, Token: task.Token,
					Error: store.ErrorInfo{Type: "Flaky", Message: "try again"}, Retry: true, Rule: "[retry: 3]"}); err != nil {
					b.Fatal(err)
				}
			}
			task := claim()
			if _, err := s.TaskComplete(ctx, &store.TaskCompleteParams{TaskID: task.ID, Token: task.Token, Output: json.RawMessage(`{"ok":true}`)}); err != nil {
				b.Fatal(err)
			}
			if _, err := s.RunAdvance(ctx, &store.RunAdvanceParams{RunID: id, Token: lease.Token,
				Finish: &store.RunFinish{Status: store.RunCompleted, Output: json.RawMessage(`{"ok":true}`)}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	elapsed := time.Since(start).Seconds()
	runs := float64(b.N) / elapsed
	b.ReportMetric(runs, "runs/s")
	b.ReportMetric(runs*float64(1+failures), "attempts/s")
	b.ReportMetric(runs*float64(5+2*failures), "tx/s")
}
