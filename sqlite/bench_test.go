package sqlite_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"reprise"
	"reprise/sqlite"
)

// BenchmarkStore measures the store calls of one-step runs on a database
// file: RunCreate, RunAdvance (one step), TaskClaim, TaskComplete and
// RunAdvance (finish), from many goroutines at once, as an engine makes
// them. It reports runs/s and store calls/s.
//
//	go test ./sqlite -run '^$' -bench Store -benchtime 20000x
func BenchmarkStore(b *testing.B) {
	for _, sync := range []string{"FULL", "NORMAL"} {
		b.Run("synchronous="+sync, func(b *testing.B) {
			s, err := sqlite.Open(filepath.Join(b.TempDir(), "bench.db"), &sqlite.Options{Synchronous: sync})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := b.Context()
			var worker, runs atomic.Int64
			input := json.RawMessage(`{"order":42,"items":["a","b"]}`)

			b.SetParallelism(128)
			b.ResetTimer()
			start, cpu := time.Now(), cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				// Each goroutine claims only its own step name, so that it
				// finds the task it scheduled.
				step := fmt.Sprintf("step-%d", worker.Add(1))
				for pb.Next() {
					id := fmt.Sprintf("run-%d", runs.Add(1))
					lease, _, err := s.RunCreate(ctx, &reprise.RunCreateParams{
						ID: id, Workflow: "bench", Input: input, Owner: "engine", LeaseTTL: time.Minute,
					})
					if err != nil {
						b.Error(err)
						return
					}
					_, err = s.RunAdvance(ctx, &reprise.RunAdvanceParams{RunID: id, Token: lease.Token, Steps: []reprise.StepSpec{{
						Position: 1, Name: step, Input: input, IdempotencyKey: id + "/1",
						PolicyText: "[retry: 3, backoff: 1s]", Policy: json.RawMessage(`{"rules":[{"max_attempts":4}]}`),
					}}})
					if err != nil {
						b.Error(err)
						return
					}
					tasks, err := s.TaskClaim(ctx, &reprise.TaskClaimParams{
						Owner: "worker", Steps: []reprise.StepQuota{{Name: step, Limit: 1}}, LeaseTTL: time.Minute,
					})
					if err != nil || len(tasks) != 1 {
						b.Errorf("claim: %d tasks, %v", len(tasks), err)
						return
					}
					_, err = s.TaskComplete(ctx, &reprise.TaskCompleteParams{TaskID: tasks[0].ID, Token: tasks[0].Token, Output: input})
					if err != nil {
						b.Error(err)
						return
					}
					_, err = s.RunAdvance(ctx, &reprise.RunAdvanceParams{RunID: id, Token: lease.Token, Finish: &reprise.RunFinish{
						Status: reprise.RunCompleted, Output: input,
					}})
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			elapsed := time.Since(start).Seconds()
			b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/run")
			b.ReportMetric(float64(b.N)/elapsed, "runs/s")
			b.ReportMetric(5*float64(b.N)/elapsed, "calls/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// cpuTime is the CPU time the process has used, user and system: what a
// run costs, whatever else the machine is doing.
func cpuTime() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
