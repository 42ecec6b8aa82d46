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

func main() {
	dsn := flag.String("dsn", os.Getenv("REPRISE_TEST_POSTGRES"), "PostgreSQL URL (default $REPRISE_TEST_POSTGRES)")
	schema := flag.String("schema", "river_bench", "schema to create River's tables in; dropped and created again for every round")
	jobs := flag.Int("jobs", 10000, "jobs per round")
	workers := flag.Int("workers", 100, "River's MaxWorkers")
	fail := flag.Int("fail", 2, "failed attempts before each job succeeds")
	count := flag.Int("count", 1, "rounds to measure")
	flag.Parse()
	if *dsn == "" {
		log.Fatal("--dsn is required")
	}
	ctx := context.Background()
	for range *count {
		elapsed, err := round(ctx, *dsn, *schema, *jobs, *workers, *fail)
		if err != nil {
			log.Fatal(err)
		}
		attempts := *jobs * (*fail + 1)
		fmt.Printf("BenchmarkRiver/workers=%d/fail=%d \t%8d\t%12.0f ns/op\t%10.0f attempts/s\t%10.0f jobs/s\n",
			*workers, *fail, *jobs, float64(elapsed.Nanoseconds())/float64(*jobs),
			float64(attempts)/elapsed.Seconds(), float64(*jobs)/elapsed.Seconds())
	}
}

// round migrates a fresh schema, inserts the jobs, then starts a client and
// returns how long it took to complete them all.
func round(ctx context.Context, dsn, schema string, jobs, workers, fail int) (time.Duration, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return 0, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	ident := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident+" CASCADE; CREATE SCHEMA "+ident); err != nil {
		return 0, err
	}
	defer pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+ident+" CASCADE")
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: schema})
	if err != nil {
		return 0, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return 0, fmt.Errorf("migrate: %w", err)
	}

	workersReg := river.NewWorkers()
	river.AddWorker(workersReg, &worker{})
	client, err := river.NewClient(driver, &river.Config{
		Schema:      schema,
		Queues:      map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers:     workersReg,
		RetryPolicy: retryNow{},
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		return 0, err
	}
	params := make([]river.InsertManyParams, jobs)
	for i := range params {
		params[i] = river.InsertManyParams{Args: jobArgs{Fail: fail}, InsertOpts: &river.InsertOpts{MaxAttempts: fail + 1}}
	}
	if _, err := client.InsertManyFast(ctx, params); err != nil {
		return 0, fmt.Errorf("insert: %w", err)
	}

	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	for {
		var done, failed int
		err := pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE state = 'discarded') FROM "+ident+".river_job").Scan(&done, &failed)
		if err != nil {
			return 0, err
		}
		if failed > 0 {
			return 0, fmt.Errorf("%d jobs discarded", failed)
		}
		if done == jobs {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(start)
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return elapsed, client.Stop(stopCtx)
}
