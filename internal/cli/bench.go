package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"reprise"
	"reprise/internal/bench"
	"reprise/metrics"
	"reprise/otel"
	"reprise/postgres"
	"reprise/sqlite"
	"reprise/store"
)

func benchMain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("bench", "[--runs N] [--db PATH] [--parked N] [--lateness N] [--lateness-backoff D] [--flood D]\n"+
		"       [--max-pending-runs N] [--max-resident-runs N] [--observe off|metrics|tracing|both]")
	runs := fs.Int("runs", 20000, "one-step runs per throughput workload")
	parked := fs.Int("parked", 10000, "runs to park in backoff for the memory figure (0 to skip)")
	lateness := fs.Int("lateness", 1000, "runs in backoff for the retry lateness figure (0 to skip)")
	latenessBackoff := fs.Duration("lateness-backoff", 2*time.Second, "the longest backoff of the retry lateness figure; backoffs spread over its second half")
	flood := fs.Duration("flood", 0, "how long 8 clients start runs as fast as they can, for the figures of a flood of starts (0 to skip)")
	maxResident := fs.Int("max-resident-runs", 0, "the engine's MaxResidentRuns: resident runs past which waiting ones are evicted (0: the default; -1: no cap)")
	maxPending := fs.Int("max-pending-runs", 0, "the engine's MaxPendingRuns: runs waiting to start past which starts are refused as busy (0: the default; -1: no cap)")
	db := new(string)
	dbVar(fs, db, "", "the `DATABASE`: a SQLite file (the runs stay in it), or a postgres:// URL, where each workload\n"+
		"runs in a schema of its own, dropped after (default: a fresh SQLite file in a temporary directory)")
	observe := fs.String("observe", "off", "what watches the engine: off, metrics (the Prometheus metrics of reprise server),\n"+
		"tracing (a span per run, step and attempt, batched to an exporter that drops them), or both")
	pos, code, ok := parseArgs(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageErrorf(fs, stderr, "unexpected argument %q", pos[0])
	}
	if *runs < 1 || *parked < 0 || *lateness < 0 || *flood < 0 || *latenessBackoff <= 0 || *maxPending < -1 || *maxResident < -1 {
		return usageErrorf(fs, stderr, "--runs and --lateness-backoff must be positive, --parked, --lateness and --flood not negative, --max-pending-runs and --max-resident-runs -1 or more")
	}
	switch *observe {
	case "off", "metrics", "tracing", "both":
	default:
		return usageErrorf(fs, stderr, "--observe %q: give off, metrics, tracing or both", *observe)
	}
	cfg := reprise.Config{MaxConcurrentSteps: 256, MaxPendingRuns: *maxPending, MaxResidentRuns: *maxResident}
	ctx := context.Background()
	fmt.Fprintf(stdout, "reprise bench: %d-core machine, one engine process, observers: %s\n\n", numCPU(), *observe)

	workloads := []struct {
		name              string
		concurrency, fail int
	}{
		{"no-op steps, 1 run at a time", 1, 0},
		{"no-op steps, 64 runs at a time", 64, 0},
		{"steps failing twice (zero backoff), 64 runs at a time", 64, 2},
	}
	for _, w := range workloads {
		n := *runs
		if w.concurrency == 1 {
			n = max(1, n/10)
		}
		err := withEngine(ctx, *db, *observe, cfg, stderr, func(e *reprise.Engine, _ store.Store) error {
			res, err := bench.RunThroughput(ctx, e, n, w.concurrency, w.fail)
			if err == nil {
				fmt.Fprintf(stdout, "%-56s %s\n", w.name+":", res)
			}
			return err
		})
		if err != nil {
			fmt.Fprintf(stderr, "reprise bench: %s: %v\n", w.name, err)
			return exitFail
		}
	}
	if *lateness > 0 {
		retries := new(bench.Retries)
		cfg := cfg
		cfg.Observer = retries
		err := withEngine(ctx, *db, *observe, cfg, stderr, func(e *reprise.Engine, _ store.Store) error {
			res, err := bench.RunLateness(ctx, e, retries, *lateness, *latenessBackoff)
			if err == nil {
				fmt.Fprintf(stdout, "%-56s %s\n", fmt.Sprintf("retry lateness, backoffs spread over %v-%v:", *latenessBackoff/2, *latenessBackoff), res)
				p50, p99, most := bench.SleepJitter(1000)
				fmt.Fprintf(stdout, "%-56s p50 %v p99 %v max %v\n", "  the machine's own lateness, waking from 1 ms sleeps:", p50, p99, most)
			}
			return err
		})
		if err != nil {
			fmt.Fprintf(stderr, "reprise bench: lateness: %v\n", err)
			return exitFail
		}
	}
	if *flood > 0 {
		retries := new(bench.Retries)
		cfg := cfg
		cfg.Observer = retries
		err := withEngine(ctx, *db, *observe, cfg, stderr, func(e *reprise.Engine, _ store.Store) error {
			res, err := bench.RunFlood(ctx, e, retries, 8, *flood)
			if err == nil {
				fmt.Fprintf(stdout, "%-56s %s\n", "flood of starts:", res)
			}
			return err
		})
		if err != nil {
			fmt.Fprintf(stderr, "reprise bench: flood: %v\n", err)
			return exitFail
		}
	}
	if *parked > 0 {
		err := withEngine(ctx, *db, *observe, cfg, stderr, func(e *reprise.Engine, st store.Store) error {
			res, err := bench.RunParked(ctx, e, st, *parked)
			if err == nil {
				fmt.Fprintf(stdout, "%-56s %s\n", "memory:", res)
			}
			return err
		})
		if err != nil {
			fmt.Fprintf(stderr, "reprise bench: parked: %v\n", err)
			return exitFail
		}
	}
	return exitOK
}

// withEngine runs fn against a running engine configured by cfg on a
// fresh database (or db), and the engine's store; the engine is watched by
// the observers observe names (--observe).
func withEngine(ctx context.Context, db, observe string, cfg reprise.Config, stderr io.Writer, fn func(*reprise.Engine, store.Store) error) error {
	var st store.Store
	var err error
	switch {
	case db == "":
		dir, derr := os.MkdirTemp("", "reprise-bench-")
		if derr != nil {
			return derr
		}
		defer os.RemoveAll(dir)
		st, err = sqlite.Open(ctx, filepath.Join(dir, "bench.db"), nil)
	case isPostgresURL(db):
		var drop func() error
		st, drop, err = benchSchema(ctx, db)
		if err == nil {
			defer func() {
				if err := drop(); err != nil {
					fmt.Fprintf(stderr, "reprise bench: %v\n", err)
				}
			}()
		}
	default:
		st, err = openEngineStore(ctx, db, postgres.Options{})
	}
	if err != nil {
		return err
	}
	defer st.Close()
	cfg.Store = st
	var obs observers
	if cfg.Observer != nil { // the workload's own
		obs = append(obs, cfg.Observer)
	}
	if observe == "metrics" || observe == "both" {
		m, err := metrics.New(prometheus.NewRegistry())
		if err != nil {
			return err
		}
		obs = append(obs, m)
	}
	if observe == "tracing" || observe == "both" {
		tr := otel.New(sdktrace.WithBatcher(dropSpans{}))
		defer func() { _ = tr.Shutdown(context.WithoutCancel(ctx)) }() // its exporter drops all: nothing to lose
		obs, cfg.Tracer = append(obs, tr), tr
	}
	switch len(obs) {
	case 0:
	case 1:
		cfg.Observer = obs[0]
	default:
		cfg.Observer = obs
	}
	e, err := reprise.New(cfg)
	if err != nil {
		return err
	}
	if err := e.Register(bench.Definitions()...); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	err = fn(e, st)
	cancel()
	return errors.Join(err, <-done)
}

// dropSpans is a span exporter that drops what it gets: the bench
// measures what tracing costs the engine, not an exporter's I/O.
type dropSpans struct{}

func (dropSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (dropSpans) Shutdown(context.Context) error                             { return nil }

// benchSchema opens a store on PostgreSQL in a schema of its own, so that
// a benchmark pointed at a database leaves no runs in it; drop closes the
// store and drops the schema.
func benchSchema(ctx context.Context, dsn string) (st store.Store, drop func() error, err error) {
	schema := fmt.Sprintf("reprise_bench_%d_%d", os.Getpid(), time.Now().UnixNano())
	s, err := postgres.Open(ctx, dsn, &postgres.Options{Schema: schema})
	if err != nil {
		return nil, nil, fmt.Errorf("open postgres: %w", err)
	}
	drop = func() error {
		s.Close()
		conn, err := pgx.Connect(context.WithoutCancel(ctx), dsn)
		if err != nil {
			return fmt.Errorf("drop schema %s: %w", schema, err)
		}
		defer conn.Close(context.WithoutCancel(ctx))
		if _, err := conn.Exec(context.WithoutCancel(ctx), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			return fmt.Errorf("drop schema %s: %w", schema, err)
		}
		return nil
	}
	return s, drop, nil
}

func numCPU() int { return runtime.NumCPU() }
