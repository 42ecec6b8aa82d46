package multiproc

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"reprise/internal/proccpu"
)

// BenchmarkFloor measures what the database alone costs a run failing
// twice, with no engine: the statements such a run needs at least, sent by
// two connections in lock step for batches of 50 runs (100 in flight, as
// the engine's 100 slots and River's 100 workers), on the store's own
// schema and backlog. Each batch is claimed as the store claims runs and
// its history read; then come its four writes (the step scheduled with its
// first attempt started, two retries, the result with the run's end), each
// committed on its own as the engine's are. Every write appends its events.
//
// The shapes are four ways of writing the same:
//
//   - locked: the run rows locked by a read ahead, then the run's head with
//     its events, then the step's task row, in one transaction (the store's
//     shape, in one round trip where the store takes two); a retry, which
//     starts the next attempt in place, reads the task row and writes none;
//   - unlocked: the same without the locking read;
//   - fenced: one statement, the run's token checked in it, the task row
//     written (or read) only for the runs it updated;
//   - run-row: one fenced statement, the leased step kept in the run's row
//     instead of a task row.
//
// The engine's figures (BenchmarkProcesses) over these are its own cost;
// what separates the shapes is what a change of the store's layout could
// save at most. docs/benchmarks.md has the figures.
func BenchmarkFloor(b *testing.B) {
	dsn := testDSN(b)
	for _, shape := range []string{"locked", "unlocked", "fenced", "run-row"} {
		b.Run("shape="+shape, func(b *testing.B) {
			benchmarkFloor(b, dsn, shape, 2, 50)
		})
	}
}

// The events of a run failing twice, as the store writes them: one row
// per write, the events of the first write and of the last as an array.
const (
	floorStarted  = `{"type":"AttemptStarted","position":1,"step":"bench.noop","attempt":2,"idempotency_key":"f3faf834bcdf35d7da0a8672e3435225","worker":"vm-6636-21d3aac8","lease_until":"2026-11-25T00:53:07.348104619Z"}`
	floorFailed   = `{"type":"AttemptFailed","position":1,"step":"bench.noop","attempt":1,"error":{"type":"errorString","message":"planned failure"},"retry_at":"2026-11-25T00:52:37.348104619Z","rule":"[retry: unlimited, backoff_kind: none]","delay_ms":0}`
	floorFirst    = `[{"type":"StepScheduled","position":1,"step":"bench.noop","input":{"fail":2},"policy":"[retry: unlimited, backoff_kind: none]","idempotency_key":"f3faf834bcdf35d7da0a8672e3435225"},` + floorStarted + `]`
	floorRetry    = `[` + floorFailed + `,` + floorStarted + `]`
	floorEnd      = `[{"type":"StepCompleted","position":1,"step":"bench.noop","attempt":3,"output":3},{"type":"RunCompleted","output":3}]`
	floorStepsRow = `one leased step: position, attempt, token, lease, key and policy`
)

// The statements of BenchmarkFloor. $1 and $2 are the batch's run ids and
// their tokens from the claim.
const (
	floorClaim = `UPDATE reprise_run SET owner = 'floor', token = token + 1, lease_until = now() + interval '30s'
WHERE id IN (SELECT id FROM reprise_run WHERE status IN ('pending', 'running') AND owner = ''
             ORDER BY created_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING id, token`
	floorHistory = `SELECT run_id, seq, data::text FROM reprise_event WHERE run_id = ANY($1)`
	floorLock    = `SELECT id, last_seq FROM reprise_run WHERE id = ANY($1) FOR NO KEY UPDATE`

	// floorHead advances the heads of the runs whose tokens still hold,
	// setting their status ($4, 'completed' at the end) and the run-row
	// shape's leased steps ($5), as r; floorEvents then appends the events
	// ($3) of the runs in r.
	floorHead = `WITH w AS (SELECT * FROM unnest($1::text[], $2::bigint[]) AS w(id, token)),
r AS (UPDATE reprise_run r SET last_seq = r.last_seq + 1, status = $4, steps = $5,
             owner = CASE WHEN $4 = 'completed' THEN '' ELSE r.owner END, updated_at = now()
      FROM w WHERE r.id = w.id AND r.owner = 'floor' AND r.token = w.token
      RETURNING r.id, r.last_seq)`
	floorEvents = `INSERT INTO reprise_event (run_id, seq, type, execution, at, data)
SELECT r.id, r.last_seq, 'x', 1, now(), $3::json FROM r`

	// The task statements, for the runs in r, returning a row each.
	floorTaskInsert = `INSERT INTO reprise_task (run_id, execution, position, step, input, idempotency_key, policy,
        attempt, owner, token, ready_at, lease_until, started_at, first_started_at, created_at)
SELECT r.id, 1, 1, 'bench.noop', '{"fail":2}', 'f3faf834bcdf35d7da0a8672e3435225', '"x"',
       1, 'floor', 1, now(), now() + interval '30s', now(), now(), now() FROM r
RETURNING run_id`
	floorTaskRead = `SELECT t.run_id, t.attempt, t.token, t.owner, t.lease_until, t.input, t.idempotency_key, t.policy
FROM reprise_task t JOIN r ON t.run_id = r.id AND t.execution = 1 AND t.position = 1`
	floorTaskDelete = `DELETE FROM reprise_task t USING r WHERE t.run_id = r.id AND t.execution = 1 AND t.position = 1
RETURNING t.run_id`
)

// benchmarkFloor runs b.N runs failing twice through the writes of shape,
// on conns connections each taking batch runs at a time.
func benchmarkFloor(b *testing.B, dsn, shape string, conns, batch int) {
	c := newCluster(b, dsn)
	ctx := b.Context()
	if _, err := c.pool.Exec(ctx, "ALTER TABLE "+pgx.Identifier{c.schema}.Sanitize()+".reprise_run ADD COLUMN steps text"); err != nil {
		b.Fatal(err)
	}
	if err := c.createRuns(ctx, "bench", "bench.one-step", b.N, func(int) string { return `{"fail":2}` }); err != nil {
		b.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = c.schema
	// The planner settings of the store's connections (postgres.Open):
	// without them, a statement that joins a table with a batch's keys
	// may scan the table instead (auto_explain showed the task insert of
	// the locked shape reading all of reprise_run, 1.1 ms a statement).
	for k, v := range map[string]string{"plan_cache_mode": "force_generic_plan", "enable_seqscan": "off", "enable_bitmapscan": "off"} {
		cfg.RuntimeParams[k] = v
	}
	var pipes []*pgx.Conn
	defer func() {
		for _, conn := range pipes {
			conn.Close(ctx)
		}
	}()
	for range conns {
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		pipes = append(pipes, conn)
	}
	writes := []struct{ events, status, task string }{
		{floorFirst, "running", floorTaskInsert},
		{floorRetry, "running", floorTaskRead},
		{floorRetry, "running", floorTaskRead},
		{floorEnd, "completed", floorTaskDelete},
	}
	write := func(conn *pgx.Conn, ids []string, tokens []int64, events, status, task string) error {
		args := []any{ids, tokens, events, status, nil}
		switch shape {
		case "run-row":
			args[4] = floorStepsRow
			_, err := conn.Exec(ctx, floorHead+"\n"+floorEvents, args...)
			return err
		case "fenced":
			_, err := conn.Exec(ctx, floorHead+", e AS ("+floorEvents+"), t AS ("+task+") SELECT count(*) FROM t", args...)
			return err
		}
		bt := &pgx.Batch{}
		bt.Queue("BEGIN")
		if shape == "locked" {
			bt.Queue(floorLock, ids)
		}
		bt.Queue(floorHead+"\n"+floorEvents, args...)
		bt.Queue("WITH r AS (SELECT unnest($1::text[]) AS id)\n"+task, ids)
		bt.Queue("COMMIT")
		return conn.SendBatch(ctx, bt).Close()
	}

	b.ResetTimer()
	start, server := time.Now(), proccpu.Comm("postgres")
	var wg sync.WaitGroup
	errs := make(chan error, len(pipes))
	for _, conn := range pipes {
		wg.Go(func() {
			for {
				var (
					ids    []string
					tokens []int64
					id     string
					token  int64
				)
				rows, _ := conn.Query(ctx, floorClaim, batch)
				_, err := pgx.ForEachRow(rows, []any{&id, &token}, func() error {
					ids, tokens = append(ids, id), append(tokens, token)
					return nil
				})
				if err != nil {
					errs <- fmt.Errorf("claim: %w", err)
					return
				}
				if len(ids) == 0 {
					return
				}
				var seq int64
				var data string
				rows, _ = conn.Query(ctx, floorHistory, ids)
				if _, err := pgx.ForEachRow(rows, []any{&id, &seq, &data}, func() error { return nil }); err != nil {
					errs <- fmt.Errorf("history: %w", err)
					return
				}
				for i, w := range writes {
					if err := write(conn, ids, tokens, w.events, w.status, w.task); err != nil {
						errs <- fmt.Errorf("write %d: %w", i+1, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	server = proccpu.Comm("postgres") - server
	b.StopTimer()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	if n := c.finished(ctx); n != b.N {
		b.Fatalf("%d of %d runs finished", n, b.N)
	}
	attempts := float64(b.N * 3)
	b.ReportMetric(attempts/elapsed.Seconds(), "attempts/s")
	b.ReportMetric(float64(server.Microseconds())/attempts, "server-cpu-µs/attempt")
}
