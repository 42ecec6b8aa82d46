package multiproc

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"reprise"
	"reprise/store"
)

// testDSN returns the shared test server's address, or skips the test.
func testDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("REPRISE_TEST_POSTGRES")
	if dsn == "" {
		t.Skip("REPRISE_TEST_POSTGRES is not set; set it to a PostgreSQL URL " +
			"(e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable) to run the multi-process tests")
	}
	return dsn
}

// TestKillOneOfThree runs 1,000 chaos runs on three engine processes and
// kills one of them with SIGKILL when about a third of the runs are done.
// The other two take over its runs after their leases lapse, and the
// reaper fails its attempts in flight with Timeout; every run must still
// end as its steps' fates say, with one outcome per step.
func TestKillOneOfThree(t *testing.T) {
	t.Parallel()
	const runs = 1000
	c := newCluster(t, testDSN(t))
	ctx := t.Context()
	start := time.Now()
	for _, id := range []string{"engine-a", "engine-b", "engine-c"} {
		c.start(id, time.Second, 100)
	}
	t.Logf("3 engine processes ready in %v", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	if err := c.createRuns(ctx, "chaos", chaosWorkflowName, runs, strconv.Itoa); err != nil {
		t.Fatal(err)
	}
	c.waitFinished(ctx, runs/3, 10*time.Millisecond, 60*time.Second)
	t.Logf("%d runs finished after %v: killing engine-b", c.finished(ctx), time.Since(start).Round(time.Millisecond))
	c.kill("engine-b")
	c.waitFinished(ctx, runs, 50*time.Millisecond, 90*time.Second)
	t.Logf("all %d runs finished after %v", runs, time.Since(start).Round(time.Millisecond))
	c.stopAll()

	// engine-b's attempts in flight time out. The others' may too, when the
	// machine is so loaded (-race, other tests) that a result is recorded
	// more than LeaseTTL after its claim: then the lease has lapsed, the
	// result is rejected and the attempt counts as timed out.
	stats := checkRuns(t, c, "chaos", runs, func(string) bool { return true })
	t.Logf("%v", stats)
	if stats.byWorker["engine-b"] == 0 {
		t.Errorf("engine-b ran no attempt before it was killed")
	}
}

// TestPostgresRestart runs chaos runs on three engine processes and
// restarts the PostgreSQL server under them. The server is one of the
// test's own (initdb into a temporary directory), so that the restart does
// not break the tests of other packages running beside this one on the
// shared server.
func TestPostgresRestart(t *testing.T) {
	t.Parallel()
	const runs = 400
	srv := startServer(t)
	c := newCluster(t, srv.dsn)
	ctx := t.Context()
	for _, id := range []string{"engine-a", "engine-b", "engine-c"} {
		c.start(id, time.Second, 100)
	}
	start := time.Now()
	if err := c.createRuns(ctx, "chaos", chaosWorkflowName, runs, strconv.Itoa); err != nil {
		t.Fatal(err)
	}
	c.waitFinished(ctx, runs/3, 10*time.Millisecond, 60*time.Second)
	t.Logf("%d runs finished after %v: restarting the server", c.finished(ctx), time.Since(start).Round(time.Millisecond))
	took := srv.restart(t)
	t.Logf("server restarted in %v", took.Round(time.Millisecond))
	c.waitFinished(ctx, runs, 50*time.Millisecond, 90*time.Second)
	t.Logf("all %d runs finished after %v", runs, time.Since(start).Round(time.Millisecond))
	c.stopAll()

	// Any attempt in flight during the restart may have lost its lease.
	stats := checkRuns(t, c, "chaos", runs, func(string) bool { return true })
	t.Logf("%v", stats)
}

type runStats struct {
	completed, failed int
	attempts          int
	lapses            map[string]int // timed out or lost, by the worker of the attempt
	byWorker          map[string]int // attempts started
}

func (s runStats) String() string {
	return fmt.Sprintf("runs completed %d, failed %d; %d attempts, by engine %v; timed out or lost, by engine %v",
		s.completed, s.failed, s.attempts, s.byWorker, s.lapses)
}

// checkRuns checks every run of the chaos workload with checkRun.
func checkRuns(t *testing.T, c *cluster, prefix string, n int, mayTimeOut func(string) bool) runStats {
	t.Helper()
	ctx := t.Context()
	stats := runStats{byWorker: map[string]int{}, lapses: map[string]int{}}
	bad := 0
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		run, err := c.store.RunGet(ctx, id)
		if err != nil {
			t.Fatalf("run %s: %v", id, err)
		}
		events, err := c.store.HistoryList(ctx, &store.HistoryListParams{RunID: id})
		if err != nil {
			t.Fatalf("history of %s: %v", id, err)
		}
		if err := checkRun(run, events, mayTimeOut); err != nil {
			if bad++; bad <= 10 {
				t.Errorf("run %s: %v", id, err)
			}
		}
		switch run.Status {
		case store.RunCompleted:
			stats.completed++
		case store.RunFailed:
			stats.failed++
		}
		worker := map[int]string{} // by position
		for _, ev := range events {
			switch {
			case ev.Type == store.EventAttemptStarted:
				stats.attempts++
				stats.byWorker[ev.Worker]++
				worker[ev.Position] = ev.Worker
			case ev.Type == store.EventAttemptFailed && ev.Error != nil &&
				(ev.Error.Type == reprise.TypeTimeout || ev.Error.Type == reprise.TypeWorkerLost):
				stats.lapses[worker[ev.Position]]++
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d runs are wrong", bad, n)
	}
	return stats
}
