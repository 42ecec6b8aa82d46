package sqlite_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"reprise/internal/bench"
	"reprise/sqlite"
	"reprise/store"
)

// BenchmarkStore measures the store calls of one-step runs on a database
// file: RunCreate, RunAdvance (one step), TaskClaim, TaskComplete and
// RunAdvance (finish), from many goroutines at once, as an engine makes
// them. It reports runs/s, store calls/s and CPU time per run. The retry
// paths fail the first attempt once and retry it at once, through the
// queue (TaskFail, TaskClaim) or leased by TaskFail itself (LeaseNext).
//
//	go test ./sqlite -run '^$' -bench Store -benchtime 20000x
func BenchmarkStore(b *testing.B) {
	for _, sync := range []string{"FULL", "NORMAL"} {
		for _, path := range []string{"claim", "lease", "retry-claim", "retry-lease"} {
			b.Run("synchronous="+sync+"/"+path, func(b *testing.B) { benchmarkRuns(b, sync, path) })
		}
	}
}

// benchmarkRuns runs one-step runs from many goroutines. A step is either
// claimed from the queue (TaskClaim) or, on the other paths, leased to the
// engine as it is scheduled, which spares the claim: 5 or 4 store calls a
// run, and 2 or 1 more for a retry.
func benchmarkRuns(b *testing.B, sync, path string) {
	leased := path != "claim"
	s, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "bench.db"), &sqlite.Options{Synchronous: sync})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := b.Context()
	var worker, runs, calls atomic.Int64
	input := json.RawMessage(`{"order":42,"items":["a","b"]}`)

	b.SetParallelism(128)
	b.ResetTimer()
	start, cpu := time.Now(), bench.CPUTime()
	b.RunParallel(func(pb *testing.PB) {
		// Each goroutine claims only its own step name, so that it finds
		// the task it scheduled.
		step := fmt.Sprintf("step-%d", worker.Add(1))
		for pb.Next() {
			id := fmt.Sprintf("run-%d", runs.Add(1))
			run, _, err := s.RunCreate(ctx, &store.RunCreateParams{
				ID: id, Workflow: "bench", Input: input, Owner: "engine", LeaseTTL: time.Minute,
			})
			if err != nil {
				b.Error(err)
				return
			}
			adv, err := s.RunAdvance(ctx, &store.RunAdvanceParams{
				RunID: id, Token: run.Token, LeaseOwner: "engine", LeaseTTL: time.Minute,
				Steps: []store.StepSpec{{
					Position: 1, Name: step, Input: input, IdempotencyKey: id + "/1", Lease: leased,
					PolicyText: "[retry: 3, backoff: 1s]", Policy: json.RawMessage(`{"rules":[{"max_attempts":4}]}`),
				}},
			})
			if err != nil {
				b.Error(err)
				return
			}
			tasks := adv.Tasks
			if !leased {
				tasks, err = s.TaskClaim(ctx, &store.TaskClaimParams{
					Owner: "worker", Steps: []store.StepQuota{{Name: step, Limit: 1}}, LeaseTTL: time.Minute,
				})
				calls.Add(1)
			}
			if err != nil || len(tasks) != 1 {
				b.Errorf("claim: %d tasks, %v", len(tasks), err)
				return
			}
			if path == "retry-claim" || path == "retry-lease" {
				out, err := s.TaskFail(ctx, &store.TaskFailParams{
					TaskID: tasks[0].ID, Token: tasks[0].Token, Error: store.ErrorInfo{Type: "NetworkError"},
					Retry: true, Rule: "[retry: 3]",
					LeaseNext: path == "retry-lease", LeaseOwner: "engine", LeaseTTL: time.Minute,
				})
				if err != nil {
					b.Error(err)
					return
				}
				calls.Add(1)
				if out.Next != nil {
					tasks = []*store.Task{out.Next}
				} else {
					tasks, err = s.TaskClaim(ctx, &store.TaskClaimParams{
						Owner: "worker", Steps: []store.StepQuota{{Name: step, Limit: 1}}, LeaseTTL: time.Minute,
					})
					calls.Add(1)
				}
				if err != nil || len(tasks) != 1 {
					b.Errorf("retry: %d tasks, %v", len(tasks), err)
					return
				}
			}
			_, err = s.TaskComplete(ctx, &store.TaskCompleteParams{TaskID: tasks[0].ID, Token: tasks[0].Token, Output: input})
			if err != nil {
				b.Error(err)
				return
			}
			_, err = s.RunAdvance(ctx, &store.RunAdvanceParams{RunID: id, Token: run.Token, Finish: &store.RunFinish{
				Status: store.RunCompleted, Output: input,
			}})
			if err != nil {
				b.Error(err)
				return
			}
			calls.Add(4)
		}
	})
	elapsed := time.Since(start).Seconds()
	b.ReportMetric(float64((bench.CPUTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/run")
	b.ReportMetric(float64(b.N)/elapsed, "runs/s")
	b.ReportMetric(float64(calls.Load())/elapsed, "calls/s")
	b.ReportMetric(0, "ns/op")
}
