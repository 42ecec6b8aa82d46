package multiproc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"reprise"
	"reprise/internal/bench"
	"reprise/internal/cli"
	"reprise/postgres"
	"reprise/store"
)

// Environment of an engine process (TestEngineProcess).
const (
	envWorker      = "REPRISE_MULTIPROC_WORKER" // the engine's WorkerID; set only in an engine process
	envDSN         = "REPRISE_MULTIPROC_DSN"
	envSchema      = "REPRISE_MULTIPROC_SCHEMA"
	envLeaseTTL    = "REPRISE_MULTIPROC_LEASE_TTL"
	envConcurrency = "REPRISE_MULTIPROC_CONCURRENCY"
	// envCPUProfile, set in the test's own environment, makes each engine
	// process write a CPU profile to its value followed by "." and its id.
	envCPUProfile = "REPRISE_MULTIPROC_CPUPROFILE"
	// envMemProfile is the same for a memory profile of every allocation.
	envMemProfile = "REPRISE_MULTIPROC_MEMPROFILE"
	// envWriters, set in the test's own environment, is the engine
	// processes' postgres.Options.Writers (the default: unset).
	envWriters = "REPRISE_MULTIPROC_WRITERS"
	// envGate makes an engine process wait, once ready, until its
	// standard input is closed before it runs its engine (see spawnGated);
	// meanwhile it echoes what it reads there.
	envGate = "REPRISE_MULTIPROC_GATE"
)

// TestEngineProcess is an engine process: the parent test runs this test
// binary again with envWorker set. It runs an engine with the chaos and the
// bench workloads on the given schema until SIGTERM (or SIGKILL).
//
//nolint:paralleltest // the process's own: it takes the process's signals and tunes its GC
func TestEngineProcess(t *testing.T) {
	id := os.Getenv(envWorker)
	if id == "" {
		t.Skip("only runs as an engine process started by the other tests")
	}
	cli.TuneGC() // as the reprise command's server does
	ctx, stop := signal.NotifyContext(t.Context(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ttl, err := time.ParseDuration(os.Getenv(envLeaseTTL))
	if err != nil {
		t.Fatal(err)
	}
	concurrency, err := strconv.Atoi(os.Getenv(envConcurrency))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	writers, _ := strconv.Atoi(os.Getenv(envWriters))
	st, err := postgres.Open(ctx, os.Getenv(envDSN), &postgres.Options{
		Schema: os.Getenv(envSchema), NoMigrate: true, Logger: log,
		MaxConns: int32(max(4, concurrency/10)), Writers: writers,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e, err := reprise.New(reprise.Config{
		Store: st, WorkerID: id, Logger: log,
		LeaseTTL: ttl, RunLeaseTTL: 2 * ttl, PollInterval: 200 * time.Millisecond,
		MaxConcurrentSteps: concurrency, ShutdownGrace: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(append(bench.Definitions(), chaosWorkflow, chaosStep)...); err != nil {
		t.Fatal(err)
	}
	fmt.Println("engine ready")
	if os.Getenv(envGate) != "" {
		if _, err := io.Copy(os.Stdout, os.Stdin); err != nil { // until the parent closes it
			t.Fatalf("wait for the gate: %v", err)
		}
	}
	if err := e.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// A cluster is a schema of its own on a PostgreSQL server, and the engine
// processes working on it.
type cluster struct {
	t      testing.TB
	dsn    string
	schema string
	store  *postgres.Store // the test's own, to create runs and read them
	pool   *pgxpool.Pool   // the test's own statements

	mu    sync.Mutex
	procs map[string]*process
}

type process struct {
	id   string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	gate io.WriteCloser // spawnGated's: closed to let the engine run
}

// newCluster creates a schema on the server at dsn, migrated, and drops it
// when the test ends.
func newCluster(t testing.TB, dsn string) *cluster {
	t.Helper()
	schema := fmt.Sprintf("reprise_multiproc_%d", time.Now().UnixNano()%1e12)
	ctx := t.Context()
	if err := postgres.Migrate(ctx, dsn, &postgres.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, dsn: dsn, schema: schema, procs: map[string]*process{}}
	var err error
	if c.store, err = postgres.Open(ctx, dsn, &postgres.Options{Schema: schema, NoMigrate: true, MaxConns: 8}); err != nil {
		t.Fatal(err)
	}
	if c.pool, err = pgxpool.New(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.stopAll()
		c.store.Close()
		// The test's context has ended; the drop is bounded by its tries.
		ctx := context.WithoutCancel(ctx)
		// The server may be restarting: try a few times.
		for range 20 {
			_, err = c.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			if err == nil {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
		c.pool.Close()
	})
	return c
}

// start starts an engine process and waits until it is ready.
func (c *cluster) start(id string, leaseTTL time.Duration, concurrency int) {
	c.t.Helper()
	c.waitReady(c.spawn(id, leaseTTL, concurrency))
}

// spawn starts an engine process.
func (c *cluster) spawn(id string, leaseTTL time.Duration, concurrency int) *process {
	c.t.Helper()
	return c.launch(id, leaseTTL, concurrency, false)
}

// spawnGated starts an engine process that, once ready (waitReady), waits
// for open before it runs its engine: a benchmark's clock then leaves out
// the process's start, its connection and its schema check, as
// bench/river's leaves out making its client and pool.
func (c *cluster) spawnGated(id string, leaseTTL time.Duration, concurrency int) *process {
	c.t.Helper()
	return c.launch(id, leaseTTL, concurrency, true)
}

// open lets a process from spawnGated run its engine.
func (p *process) open() { p.gate.Close() }

// launch starts an engine process, gated (spawnGated) or not.
func (c *cluster) launch(id string, leaseTTL time.Duration, concurrency int, gated bool) *process {
	c.t.Helper()
	args := []string{"-test.run=^TestEngineProcess$", "-test.count=1", "-test.v"}
	if prof := os.Getenv(envCPUProfile); prof != "" {
		args = append(args, "-test.cpuprofile="+prof+"."+id)
	}
	if prof := os.Getenv(envMemProfile); prof != "" {
		args = append(args, "-test.memprofile="+prof+"."+id, "-test.memprofilerate=1")
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(),
		envWorker+"="+id, envDSN+"="+c.dsn, envSchema+"="+c.schema,
		envLeaseTTL+"="+leaseTTL.String(), envConcurrency+"="+strconv.Itoa(concurrency))
	p := &process{id: id, cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if gated {
		cmd.Env = append(cmd.Env, envGate+"=1")
		gate, err := cmd.StdinPipe()
		if err != nil {
			c.t.Fatal(err)
		}
		p.gate = gate
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait() // the exit is read from cmd.ProcessState
		close(p.done)
	}()
	c.mu.Lock()
	c.procs[id] = p
	c.mu.Unlock()
	return p
}

// waitReady waits until an engine process says it is ready.
func (c *cluster) waitReady(p *process) {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(p.out.String(), "engine ready") {
		select {
		case <-p.done:
			c.t.Fatalf("engine process %s exited before it was ready:\n%s", p.id, p.out)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("engine process %s not ready after a minute:\n%s", p.id, p.out)
		}
	}
}

// kill sends SIGKILL to a process and waits for it to die.
func (c *cluster) kill(id string) {
	c.mu.Lock()
	p := c.procs[id]
	delete(c.procs, id)
	c.mu.Unlock()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		c.t.Fatalf("kill engine process %s: %v\n%s", id, err, p.out)
	}
	<-p.done
}

// stopAll stops every process with SIGTERM, and reports those that failed
// or died on their own.
func (c *cluster) stopAll() {
	c.mu.Lock()
	procs := c.procs
	c.procs = map[string]*process{}
	c.mu.Unlock()
	for _, p := range procs {
		select {
		case <-p.done:
			c.t.Errorf("engine process %s exited early: %v\n%s", p.id, p.cmd.ProcessState, p.out)
			continue
		default:
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			c.t.Errorf("stop engine process %s: %v", p.id, err)
		}
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			err := p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
			c.t.Errorf("engine process %s did not stop on SIGTERM (killed: %v):\n%s", p.id, err, p.out)
			continue
		}
		if !p.cmd.ProcessState.Success() {
			c.t.Errorf("engine process %s: %v\n%s", p.id, p.cmd.ProcessState, p.out)
		} else if testing.Verbose() && strings.Contains(p.out.String(), "level=") {
			c.t.Logf("engine process %s logged:\n%s", p.id, p.out)
		}
	}
}

// createRuns creates n unowned runs of workflow, ids prefix-0..., with
// input(i) as input, for the engines to claim.
func (c *cluster) createRuns(ctx context.Context, prefix, workflow string, n int, input func(i int) string) error {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				_, _, err := c.store.RunCreate(ctx, &store.RunCreateParams{
					ID: fmt.Sprintf("%s-%d", prefix, i), Workflow: workflow, Input: []byte(input(i)),
				})
				if err != nil {
					errs <- fmt.Errorf("create run %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// finished counts the runs in an end state; a broken connection (the
// server restarting) counts as -1.
func (c *cluster) finished(ctx context.Context) int {
	var n int
	err := c.pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{c.schema}.Sanitize()+
		".reprise_run WHERE status IN ('completed', 'failed', 'cancelled')").Scan(&n)
	if err != nil {
		return -1
	}
	return n
}

// idle reports whether no run is pending or running: one index entry to
// read, where counting the finished runs reads all of them.
func (c *cluster) idle(ctx context.Context) bool {
	var active bool
	err := c.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+pgx.Identifier{c.schema}.Sanitize()+
		".reprise_run WHERE status IN ('pending', 'running'))").Scan(&active)
	return err == nil && !active
}

// waitFinished waits until n runs are finished, or fails the test after
// timeout.
func (c *cluster) waitFinished(ctx context.Context, n int, poll, timeout time.Duration) {
	c.t.Helper()
	c.waitUntil(ctx, func() bool { return c.finished(ctx) >= n }, poll, timeout)
}

// waitIdle waits until every run has finished, or fails the test after
// timeout. The benchmark polls with it: it costs the server next to
// nothing, where waitFinished's count grows with the runs finished.
func (c *cluster) waitIdle(ctx context.Context, poll, timeout time.Duration) {
	c.t.Helper()
	c.waitUntil(ctx, func() bool { return c.idle(ctx) }, poll, timeout)
}

// waitUntil polls done until it reports true, or fails the test after
// timeout, logging the engines' output and the unfinished runs.
func (c *cluster) waitUntil(ctx context.Context, done func() bool, poll, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for !done() {
		if time.Now().After(deadline) {
			c.mu.Lock()
			for _, p := range c.procs {
				c.t.Logf("engine process %s:\n%s", p.id, p.out)
			}
			c.mu.Unlock()
			c.dumpUnfinished(ctx)
			c.t.Fatalf("%d runs finished after %v", c.finished(ctx), timeout)
		}
		time.Sleep(poll)
	}
}

// dumpUnfinished logs the runs that have not finished, their tasks and
// their last events, to tell why.
func (c *cluster) dumpUnfinished(ctx context.Context) {
	q := pgx.Identifier{c.schema}.Sanitize()
	rows, err := c.pool.Query(ctx, `SELECT r.id, r.status, r.owner, r.token, r.lease_until, now(),
		coalesce((SELECT string_agg(format('task %s pos %s attempt %s owner %L token %s ready_at %s lease_until %s', t.id, t.position, t.attempt, t.owner, t.token, t.ready_at, t.lease_until), '; ') FROM `+q+`.reprise_task t WHERE t.run_id = r.id), ''),
		coalesce((SELECT string_agg(format('%s %s', e.seq, e.data), E'\n    ' ORDER BY e.seq) FROM `+q+`.reprise_event e WHERE e.run_id = r.id AND e.seq > r.last_seq - 4), '')
		FROM `+q+`.reprise_run r WHERE r.status NOT IN ('completed', 'failed', 'cancelled') ORDER BY r.id LIMIT 10`)
	if err != nil {
		c.t.Logf("dump unfinished runs: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var id, status, owner, tasks, events string
		var token int64
		var leaseUntil *time.Time
		var now time.Time
		if err := rows.Scan(&id, &status, &owner, &token, &leaseUntil, &now, &tasks, &events); err != nil {
			c.t.Logf("dump unfinished runs: %v", err)
			return
		}
		c.t.Logf("run %s %s owner %q token %d lease_until %v (now %v)\n  tasks: %s\n  last events:\n    %s", id, status, owner, token, leaseUntil, now, tasks, events)
	}
}

// syncBuffer is a bytes buffer for a child's output, safe to read while the
// child writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
