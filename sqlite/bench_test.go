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

// BenchmarkReads measures the reads of the runs list's filters and of the
// metrics' gauges on a database of 20,000 runs: 18,000 completed, 1,500
// running with a step ready, 400 retrying (200 on step charge with
// HTTP503), 100 failed on step ship.
//
//	go test ./sqlite -run '^$' -bench Reads
func BenchmarkReads(b *testing.B) {
	s, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "bench.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := b.Context()
	schedule := func(i int, step string) store.RunLease {
		lease, _, err := s.RunCreate(ctx, &store.RunCreateParams{
			ID: fmt.Sprintf("run-%05d", i), Workflow: "bench", Input: json.RawMessage(`{}`), Owner: "engine", LeaseTTL: time.Hour,
			First: &store.RunAdvanceParams{Steps: []store.StepSpec{{Position: 1, Name: step, IdempotencyKey: "k"}}},
		})
		if err != nil {
			b.Fatal(err)
		}
		return lease
	}
	claimAndFail := func(step string, n int, retry bool, errType string) {
		tasks, err := s.TaskClaim(ctx, &store.TaskClaimParams{Owner: "w", Steps: []store.StepQuota{{Name: step, Limit: n}},
			LeaseTTL: time.Minute})
		if err != nil || len(tasks) != n {
			b.Fatalf("claim %d %s: %d, %v", n, step, len(tasks), err)
		}
		for _, t := range tasks {
			_, err := s.TaskFail(ctx, &store.TaskFailParams{TaskID: t.ID, Token: t.Token, Error: store.ErrorInfo{Type: errType},
				Retry: retry, Delay: time.Hour, Reason: "exhausted"})
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	for i := range 20000 {
		switch {
		case i < 18000:
			lease := schedule(i, "done")
			_, err := s.RunAdvance(ctx, &store.RunAdvanceParams{RunID: lease.Run.ID, Token: lease.Token,
				Finish: &store.RunFinish{Status: store.RunCompleted}})
			if err != nil {
				b.Fatal(err)
			}
		case i < 19500:
			schedule(i, "ready")
		case i < 19700:
			schedule(i, "charge")
		case i < 19900:
			schedule(i, "reserve")
		default:
			schedule(i, "ship")
		}
	}
	claimAndFail("charge", 200, true, "HTTP503")
	claimAndFail("reserve", 200, true, "NetworkError")
	claimAndFail("ship", 100, false, "AddressInvalid")
	for _, c := range []struct {
		name string
		p    store.RunListParams
		want int
	}{
		{"RunList/all", store.RunListParams{Limit: 51}, 51},
		{"RunList/retrying", store.RunListParams{Retrying: true, Limit: 51}, 51},
		{"RunList/step", store.RunListParams{Step: "charge", Limit: 51}, 51},
		{"RunList/error_type", store.RunListParams{ErrorType: "AddressInvalid", Limit: 51}, 51},
		{"RunList/retrying+error_type", store.RunListParams{Retrying: true, ErrorType: "HTTP503", Limit: 51}, 51},
		{"RunList/since", store.RunListParams{CreatedSince: time.Now().Add(-time.Hour), Limit: 51}, 51},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				runs, err := s.RunList(ctx, &c.p)
				if err != nil || len(runs) != c.want {
					b.Fatalf("RunList(%+v): %d runs, %v; want %d", c.p, len(runs), err, c.want)
				}
			}
		})
	}
	b.Run("StatsGet", func(b *testing.B) {
		for b.Loop() {
			stats, err := s.StatsGet(ctx)
			if err != nil || stats.Retrying != 400 || stats.Ready["ready"] != 1500 {
				b.Fatalf("StatsGet: %+v, %v", stats, err)
			}
		}
	})
}
