package httpapi

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkStartRun: runs started per second through POST /v1/runs, one
// client at a time and from GOMAXPROCS clients.
func BenchmarkStartRun(b *testing.B) {
	s := newTestServer(b, Options{}, echo)
	input := json.RawMessage(`{"n":1}`)
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := s.c.StartRun(b.Context(), "echo", input, ""); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "runs/s")
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, _, err := s.c.StartRun(context.Background(), "echo", input, ""); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "runs/s")
	})
}

// BenchmarkPullWorkers: tasks per second through claim and complete, with
// 8 concurrent pull workers taking one task per claim. The runs are
// started before the timer; each worker long-polls.
func BenchmarkPullWorkers(b *testing.B) {
	s := newTestServer(b, Options{}, echo)
	ctx := context.Background()
	if err := s.c.RegisterStep(ctx, Step{Name: "work", Kind: KindPull}); err != nil {
		b.Fatal(err)
	}
	for range b.N {
		if _, _, err := s.c.StartStep(ctx, "work", json.RawMessage(`1`), ""); err != nil {
			b.Fatal(err)
		}
	}
	const workers = 8
	var left atomic.Int64
	left.Store(int64(b.N))
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			name := "bench-" + string(rune('a'+w))
			for left.Load() > 0 {
				tasks, err := s.c.Claim(ctx, ClaimParams{Worker: name, Steps: []string{"work"}, Wait: 100 * time.Millisecond})
				if err != nil {
					b.Error(err)
					return
				}
				for _, t := range tasks {
					if err := s.c.Complete(ctx, t.ID, t.Token, json.RawMessage(`2`)); err != nil {
						b.Error(err)
						return
					}
					left.Add(-1)
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "tasks/s")
}
