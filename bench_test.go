package reprise_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"reprise"
	"reprise/internal/bench"
	"reprise/sqlite"
)

// benchEngine runs an engine on a SQLite file for the length of the benchmark.
func benchEngine(b *testing.B) *reprise.Engine {
	st, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "bench.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	e, err := reprise.New(reprise.Config{Store: st, MaxConcurrentSteps: 256})
	if err != nil {
		b.Fatal(err)
	}
	if err := e.Register(bench.Definitions()...); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.Context())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
		if err := st.Close(); err != nil {
			b.Error(err)
		}
	})
	return e
}

// BenchmarkSteps measures one-step runs through the whole engine on SQLite:
// start, schedule, claim, attempt, complete, finish.
func BenchmarkSteps(b *testing.B) {
	for _, bc := range []struct {
		name              string
		concurrency, fail int
	}{
		{"runs=1", 1, 0},
		{"runs=64", 64, 0},
		{"fail-twice,runs=64", 64, 2},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e := benchEngine(b)
			b.ResetTimer()
			cpu := bench.CPUTime()
			res, err := bench.RunThroughput(b.Context(), e, b.N, bc.concurrency, bc.fail)
			if err != nil {
				b.Fatal(err)
			}
			// CPU per run says more than runs per second on a shared,
			// noisy machine: it does not count time others took.
			b.ReportMetric(float64((bench.CPUTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/run")
			b.ReportMetric(res.StepsPerSec(), "steps/s")
			b.ReportMetric(res.AttemptsPerSec(), "attempts/s")
			b.ReportMetric(float64(res.P99.Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkRetryLateness measures how late 1,000 retries start against
// their planned ready time.
func BenchmarkRetryLateness(b *testing.B) {
	for range b.N {
		e := benchEngine(b)
		res, err := bench.RunLateness(b.Context(), e, 1000, 2*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(res.P50.Microseconds()), "p50-µs")
		b.ReportMetric(float64(res.P99.Microseconds()), "p99-µs")
		// The machine's own wake-up lateness, the floor under the above.
		_, p99, _ := bench.SleepJitter(1000)
		b.ReportMetric(float64(p99.Microseconds()), "sleep-p99-µs")
	}
}
