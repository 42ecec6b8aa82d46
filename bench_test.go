package reprise_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"reprise"
	"reprise/internal/bench"
	"reprise/reprisetest"
	"reprise/sqlite"
)

// benchEngine runs an engine on a SQLite file for the length of the
// benchmark, with obs as its observer (nil for none).
func benchEngine(b *testing.B, obs reprise.Observer) *reprise.Engine {
	st, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "bench.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	e, err := reprise.New(reprise.Config{Store: st, MaxConcurrentSteps: 256, Observer: obs})
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
			e := benchEngine(b, nil)
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
		retries := new(bench.Retries)
		e := benchEngine(b, retries)
		res, err := bench.RunLateness(b.Context(), e, retries, 1000, 2*time.Second)
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

// BenchmarkRevive measures what a parked run costs when its wait ends:
// runs wait for a signal, all resident or nearly all parked (evicted, see
// MaxResidentRuns), and each op signals one and it finishes. The
// difference between the two is the cost of reviving a run: reading it and
// its history, and replaying its workflow to its wait.
func BenchmarkRevive(b *testing.B) {
	wf := reprise.NewWorkflow("bench-signalled", func(ctx context.Context, _ int) (int, error) {
		return reprise.WaitSignal[int](ctx, "go").Get(ctx)
	})
	for _, bc := range []struct {
		name     string
		resident int
	}{{"resident", -1}, {"parked", 100}} {
		b.Run(bc.name, func(b *testing.B) {
			st, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "bench.db"), nil)
			if err != nil {
				b.Fatal(err)
			}
			e := reprisetest.Run(b, reprise.Config{Store: st, MaxResidentRuns: bc.resident}, wf)
			b.Cleanup(func() { st.Close() })
			ids := make([]string, b.N)
			for i := range ids {
				h, err := wf.Start(b.Context(), e, 0)
				if err != nil {
					b.Fatal(err)
				}
				ids[i] = h.ID
			}
			b.ResetTimer()
			cpu := bench.CPUTime()
			for _, id := range ids {
				if err := e.SignalRun(b.Context(), id, "go", 1); err != nil {
					b.Fatal(err)
				}
			}
			for _, id := range ids {
				if _, err := e.WaitRun(b.Context(), id); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((bench.CPUTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/run")
		})
	}
}
