package multiproc

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"reprise"
	"reprise/internal/bench"
	"reprise/internal/proccpu"
	"reprise/postgres"
	"reprise/sqlite"
	"reprise/store"
)

// BenchmarkProcesses measures steps/s of 1, 2 and 4 engine processes on one
// PostgreSQL schema: b.N one-step runs of the bench workload, created
// unowned by the test process (as `reprise run --db` does) before the
// engines start, and claimed by them; the clock runs from the moment the
// engine processes, started and connected, are let go to the end of the
// last run. fail=2 makes each step fail twice, retried at once, before it
// succeeds. Every attempt is recorded in the history. Run it with a fixed
// count of runs, e.g. -benchtime 3000x; docs/benchmarks.md has the command.
func BenchmarkProcesses(b *testing.B) {
	dsn := testDSN(b)
	for _, procs := range []int{1, 2, 4} {
		for _, fail := range []int{0, 2} {
			b.Run(fmt.Sprintf("procs=%d/fail=%d", procs, fail), func(b *testing.B) {
				c := newCluster(b, dsn)
				ctx := b.Context()
				input := fmt.Sprintf(`{"fail":%d}`, fail)
				// The runs are created before the clock starts, as
				// bench/river inserts its jobs before it starts River.
				if err := c.createRuns(ctx, "bench", "bench.one-step", b.N, func(int) string { return input }); err != nil {
					b.Fatal(err)
				}
				// The engines are started and connected before the clock
				// starts, as bench/river makes its client and pool before
				// its clock, and then let go all at once, so that the first
				// does not claim the whole backlog before the others are up.
				var started []*process
				for i := range procs {
					started = append(started, c.spawnGated(fmt.Sprintf("engine-%d", i), 5*time.Second, 100))
				}
				for _, p := range started {
					c.waitReady(p)
				}
				var engines time.Duration
				for _, p := range started {
					engines -= proccpu.PID(p.cmd.Process.Pid)
				}
				b.ResetTimer()
				start, server := time.Now(), proccpu.Comm("postgres")
				for _, p := range started {
					p.open()
				}
				c.waitIdle(ctx, 10*time.Millisecond, 10*time.Minute)
				elapsed := time.Since(start)
				server = proccpu.Comm("postgres") - server
				for _, p := range started {
					engines += proccpu.PID(p.cmd.Process.Pid)
				}
				b.StopTimer()
				if n := c.finished(ctx); n != b.N {
					b.Fatalf("%d of %d runs finished", n, b.N)
				}
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "steps/s")
				attempts := float64(b.N * (fail + 1))
				b.ReportMetric(attempts/elapsed.Seconds(), "attempts/s")
				// The server's CPU includes whatever else ran on it
				// meanwhile.
				b.ReportMetric(float64(engines.Microseconds())/attempts, "engine-cpu-µs/attempt")
				b.ReportMetric(float64(server.Microseconds())/attempts, "server-cpu-µs/attempt")
				if fail > 0 {
					b.ReportMetric(float64(retryLateness(b, c.store, "bench", b.N, 99))/1e6, "p99-retry-late-ms")
				}
			})
		}
	}
}

// BenchmarkInProcess runs the same workload in one process through
// bench.RunThroughput (StartRun and Wait, 100 runs in flight), on SQLite
// and on PostgreSQL: the comparison with the embedded store, and the
// profile of the engine's own work (-cpuprofile sees this process only).
func BenchmarkInProcess(b *testing.B) {
	for _, db := range []string{"sqlite", "postgres"} {
		for _, fail := range []int{0, 2} {
			b.Run(fmt.Sprintf("db=%s/fail=%d", db, fail), func(b *testing.B) {
				var st store.Store
				var err error
				switch db {
				case "sqlite":
					st, err = sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "bench.db"), nil)
				case "postgres":
					c := newCluster(b, testDSN(b))
					st, err = postgres.Open(b.Context(), c.dsn, &postgres.Options{Schema: c.schema, NoMigrate: true, MaxConns: 10})
				}
				if err != nil {
					b.Fatal(err)
				}
				defer st.Close()
				e, err := reprise.New(reprise.Config{Store: st})
				if err != nil {
					b.Fatal(err)
				}
				if err := e.Register(bench.Definitions()...); err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(b.Context())
				done := make(chan error, 1)
				go func() { done <- e.Run(ctx) }()
				defer func() {
					cancel()
					if err := <-done; err != nil {
						b.Errorf("engine: %v", err)
					}
				}()
				b.ResetTimer()
				res, err := bench.RunThroughput(ctx, e, b.N, 100, fail)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				b.ReportMetric(res.StepsPerSec(), "steps/s")
				b.ReportMetric(res.AttemptsPerSec(), "attempts/s")
				if fail > 0 {
					runs, err := st.RunList(ctx, &store.RunListParams{Limit: 500})
					if err != nil {
						b.Fatal(err)
					}
					var late []time.Duration
					for _, r := range runs {
						late = append(late, lateness(b, st, r.ID)...)
					}
					b.ReportMetric(float64(percentile(late, 99))/1e6, "p99-retry-late-ms")
				}
			})
		}
	}
}

// retryLateness returns the p-th percentile of how late retries started
// against their retry_at, over up to 500 of the runs prefix-0...
func retryLateness(b *testing.B, st store.Store, prefix string, n, p int) time.Duration {
	var late []time.Duration
	for i := 0; i < n; i += max(1, n/500) {
		late = append(late, lateness(b, st, fmt.Sprintf("%s-%d", prefix, i))...)
	}
	return percentile(late, p)
}

// lateness lists, for each retry of a run, how long after its retry_at its
// attempt started.
func lateness(b *testing.B, st store.Store, id string) []time.Duration {
	events, err := st.HistoryList(b.Context(), &store.HistoryListParams{RunID: id})
	if err != nil {
		b.Fatal(err)
	}
	var late []time.Duration
	retryAt := map[int]time.Time{} // by position
	for _, ev := range events {
		switch {
		case ev.Type == store.EventAttemptFailed && !ev.RetryAt.IsZero():
			retryAt[ev.Position] = ev.RetryAt
		case ev.Type == store.EventAttemptStarted && ev.Attempt > 1:
			late = append(late, ev.At.Sub(retryAt[ev.Position]))
		}
	}
	return late
}

func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, len(d)*p/100)]
}

// TestGatedEngineWaits checks what BenchmarkProcesses's clock relies on: an
// engine process from spawnGated claims nothing until it is let go.
func TestGatedEngineWaits(t *testing.T) {
	t.Parallel()
	c := newCluster(t, testDSN(t))
	ctx := t.Context()
	if err := c.createRuns(ctx, "bench", "bench.one-step", 3, func(int) string { return `{"fail":0}` }); err != nil {
		t.Fatal(err)
	}
	p := c.spawnGated("engine-0", 5*time.Second, 10)
	c.waitReady(p)
	// The process echoes what its gate reads, and runs its engine only once
	// the gate closes: when a line written now comes back, it is at the
	// gate still, and has run nothing.
	if _, err := io.WriteString(p.gate, "still at the gate\n"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); !strings.Contains(p.out.String(), "still at the gate"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the gated engine process did not echo its gate within a minute:\n%s", p.out)
		}
	}
	if n := c.finished(ctx); n != 0 {
		t.Fatalf("%d runs finished before the engine was let go", n)
	}
	p.open()
	c.waitFinished(ctx, 3, 10*time.Millisecond, time.Minute)
	c.stopAll()
}
