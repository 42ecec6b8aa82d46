// Command river measures River (github.com/riverqueue/river), a PostgreSQL
// job queue in Go, on the job shape of reprise's multi-process benchmark:
// every job fails twice, then succeeds, and is retried at once (a retry
// policy that returns now). It reports attempts per second in the format of
// `go test -bench`, so that benchstat can read it.
//
//	cd bench/river && go run . --dsn postgres://postgres@127.0.0.1:5432/test?sslmode=disable
//
// It is a separate module so that reprise does not depend on River.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"reprise/internal/proccpu"
)

type jobArgs struct {
	Fail int `json:"fail"`
}

func (jobArgs) Kind() string { return "bench" }

// worker fails a job's first Fail attempts, then succeeds.
type worker struct {
	river.WorkerDefaults[jobArgs]
}

func (w *worker) Work(ctx context.Context, job *river.Job[jobArgs]) error {
	if job.Attempt <= job.Args.Fail {
		return errors.New("planned failure")
	}
	return nil
}

// retryNow retries a failed job at once (zero backoff).
type retryNow struct{}

func (retryNow) NextRetry(*rivertype.JobRow) time.Time { return time.Now() }

// config is one benchmark's settings, from the flags.
type config struct {
	dsn, schema   string
	jobs, fail    int
	workers       int
	fetchCooldown time.Duration // River's FetchCooldown
	fetchPoll     time.Duration // River's FetchPollInterval
	maxConns      int32         // pool size; 0: pgxpool's default
}

func main() {
	var c config
	flag.StringVar(&c.dsn, "dsn", os.Getenv("REPRISE_TEST_POSTGRES"), "PostgreSQL URL (default $REPRISE_TEST_POSTGRES)")
	flag.StringVar(&c.schema, "schema", "river_bench", "schema to create River's tables in; dropped and created again for every round")
	flag.IntVar(&c.jobs, "jobs", 10000, "jobs per round")
	flag.IntVar(&c.workers, "workers", 100, "River's MaxWorkers")
	flag.IntVar(&c.fail, "fail", 2, "failed attempts before each job succeeds")
	// River fetches at most once per FetchCooldown, at most as many jobs as
	// it has free workers: with the default 100 ms and 100 workers that
	// caps it at 1,000 attempts/s. River's own benchmark (cmd/river bench)
	// uses 2 ms and 20 ms.
	flag.DurationVar(&c.fetchCooldown, "fetch-cooldown", river.FetchCooldownDefault, "River's FetchCooldown")
	flag.DurationVar(&c.fetchPoll, "fetch-poll-interval", river.FetchPollIntervalDefault, "River's FetchPollInterval")
	maxConns := flag.Int("max-conns", 0, "connection pool size (default: pgxpool's, max(4, CPUs))")
	count := flag.Int("count", 1, "rounds to measure")
	flag.Parse()
	c.maxConns = int32(*maxConns)
	if c.dsn == "" {
		log.Fatal("--dsn is required")
	}
	ctx := context.Background()
	for range *count {
		r, err := round(ctx, &c)
		if err != nil {
			log.Fatal(err)
		}
		attempts := float64(c.jobs * (c.fail + 1))
		fmt.Printf("BenchmarkRiver/workers=%d/fail=%d/cooldown=%v \t%8d\t%12.0f ns/op\t%10.0f attempts/s"+
			"\t%10.1f client-cpu-µs/attempt\t%10.1f server-cpu-µs/attempt\t%10.0f jobs/s\n",
			c.workers, c.fail, c.fetchCooldown, c.jobs, float64(r.elapsed.Nanoseconds())/float64(c.jobs),
			attempts/r.elapsed.Seconds(), float64(r.client.Microseconds())/attempts, float64(r.server.Microseconds())/attempts,
			float64(c.jobs)/r.elapsed.Seconds())
	}
}

// A result is a round's time, and the CPU this process and the server used
// meanwhile (Linux; zero elsewhere).
type result struct{ elapsed, client, server time.Duration }

// round migrates a fresh schema, inserts the jobs, then starts a client and
// returns how long it took to complete them all.
func round(ctx context.Context, c *config) (result, error) {
	schema, jobs, fail := c.schema, c.jobs, c.fail
	cfg, err := pgxpool.ParseConfig(c.dsn)
	if err != nil {
		return result{}, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	if c.maxConns > 0 {
		cfg.MaxConns = c.maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return result{}, err
	}
	defer pool.Close()
	ident := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident+" CASCADE; CREATE SCHEMA "+ident); err != nil {
		return result{}, err
	}
	defer pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+ident+" CASCADE")
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: schema})
	if err != nil {
		return result{}, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return result{}, fmt.Errorf("migrate: %w", err)
	}

	workersReg := river.NewWorkers()
	river.AddWorker(workersReg, &worker{})
	client, err := river.NewClient(driver, &river.Config{
		Schema:            schema,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: c.workers}},
		FetchCooldown:     c.fetchCooldown,
		FetchPollInterval: c.fetchPoll,
		Workers:           workersReg,
		RetryPolicy:       retryNow{},
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		return result{}, err
	}
	params := make([]river.InsertManyParams, jobs)
	for i := range params {
		params[i] = river.InsertManyParams{Args: jobArgs{Fail: fail}, InsertOpts: &river.InsertOpts{MaxAttempts: fail + 1}}
	}
	if _, err := client.InsertManyFast(ctx, params); err != nil {
		return result{}, fmt.Errorf("insert: %w", err)
	}

	start, client0, server0 := time.Now(), proccpu.PID(os.Getpid()), proccpu.Comm("postgres")
	if err := client.Start(ctx); err != nil {
		return result{}, err
	}
	for {
		var done, failed int
		err := pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE state = 'discarded') FROM "+ident+".river_job").Scan(&done, &failed)
		if err != nil {
			return result{}, err
		}
		if failed > 0 {
			return result{}, fmt.Errorf("%d jobs discarded", failed)
		}
		if done == jobs {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	r := result{time.Since(start), proccpu.PID(os.Getpid()) - client0, proccpu.Comm("postgres") - server0}
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return r, client.Stop(stopCtx)
}
