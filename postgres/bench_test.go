package postgres_test

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"reprise"
	"reprise/postgres"
)

// BenchmarkStore runs whole store cycles in parallel on the database clock:
// create a run, schedule one step, claim it, complete it, finish the run.
// Each cycle is five transactions and appends six events. It reports
// runs/s and, counting every transaction, tx/s.
func BenchmarkStore(b *testing.B) {
	dsn, schema := testSchema(b)
	s := openOn(b, dsn, &postgres.Options{Schema: schema, MaxConns: 32})
	ctx := b.Context()
	var goroutines atomic.Int64
	b.SetParallelism(benchPar)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		g := goroutines.Add(1)
		owner := fmt.Sprintf("engine-%d", g)
		step := fmt.Sprintf("step-%d", g) // each goroutine claims its own steps
		for i := 0; pb.Next(); i++ {
			id := fmt.Sprintf("%s-%d", owner, i)
			lease, _, err := s.RunCreate(ctx, &reprise.RunCreateParams{
				ID: id, Workflow: "bench", Input: json.RawMessage(`{"n":1}`), Owner: owner, LeaseTTL: time.Minute,
			})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.RunAdvance(ctx, &reprise.RunAdvanceParams{RunID: id, Token: lease.Token, Steps: []reprise.StepSpec{{
				Position: 1, Name: step, Input: json.RawMessage(`{"n":1}`), IdempotencyKey: id + "/1",
				PolicyText: "[retry: 3]", Policy: json.RawMessage(`{}`),
			}}}); err != nil {
				b.Fatal(err)
			}
			tasks, err := s.TaskClaim(ctx, &reprise.TaskClaimParams{Owner: owner, Steps: []reprise.StepQuota{{Name: step, Limit: 1}}, LeaseTTL: time.Minute})
			if err != nil || len(tasks) != 1 {
				b.Fatalf("claim: %v, %d tasks", err, len(tasks))
			}
			if _, err := s.TaskComplete(ctx, &reprise.TaskCompleteParams{TaskID: tasks[0].ID, Token: tasks[0].Token, Output: json.RawMessage(`{"ok":true}`)}); err != nil {
				b.Fatal(err)
			}
			if _, err := s.RunAdvance(ctx, &reprise.RunAdvanceParams{RunID: id, Token: lease.Token,
				Finish: &reprise.RunFinish{Status: reprise.RunCompleted, Output: json.RawMessage(`{"ok":true}`)}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	elapsed := time.Since(start).Seconds()
	b.ReportMetric(float64(b.N)/elapsed, "runs/s")
	b.ReportMetric(5*float64(b.N)/elapsed, "tx/s")
}

var benchPar = 8
