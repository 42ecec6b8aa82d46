package cli

import (
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestBench runs every workload of reprise bench, small, and checks that
// each prints its figure; bad flags change nothing and say what is wrong.
func TestBench(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := runMain("bench", "--runs", "30", "--lateness", "20", "--parked", "20")
	if code != exitOK || stderr != "" {
		t.Fatalf("bench: code %d, stderr %q", code, stderr)
	}
	for _, want := range []string{
		"1 run at a time:", "64 runs at a time:", "failing twice", "30 runs in",
		"20 retries: lateness p50", "waking from 1 ms sleeps:", "20 runs parked in backoff",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("bench output lacks %q:\n%s", want, stdout)
		}
	}
	for _, args := range [][]string{{"bench", "--runs", "0"}, {"bench", "--parked", "-1"}, {"bench", "extra"}} {
		stdout, stderr, code := runMain(args...)
		if code != exitUsage || stdout != "" || stderr == "" {
			t.Errorf("%q: code %d, stdout %q, stderr %q; want a usage error", args, code, stdout, stderr)
		}
	}
}

// TestBenchOnPostgresLeavesNothing: reprise bench pointed at a PostgreSQL
// database runs each workload in a schema of its own and drops it: the
// database has no schema more afterwards, and no tables in public.
func TestBenchOnPostgresLeavesNothing(t *testing.T) {
	dsn := os.Getenv("REPRISE_TEST_POSTGRES")
	if dsn == "" {
		t.Skip("REPRISE_TEST_POSTGRES is not set (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable)")
	}
	t.Parallel()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	schemas := func() map[string]bool {
		rows, err := conn.Query(t.Context(), "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'reprise_bench_%'")
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		set := map[string]bool{}
		for _, n := range names {
			set[n] = true
		}
		return set
	}
	inPublic := func() bool {
		var found bool
		if err := conn.QueryRow(t.Context(), "SELECT to_regclass('public.reprise_run') IS NOT NULL").Scan(&found); err != nil {
			t.Fatal(err)
		}
		return found
	}
	before, publicBefore := schemas(), inPublic()
	stdout, stderr, code := runMain("bench", "--db", dsn, "--runs", "20", "--lateness", "10", "--parked", "0")
	if code != exitOK || stderr != "" || !strings.Contains(stdout, "10 retries: lateness p50") {
		t.Fatalf("bench: code %d, stderr %q, stdout:\n%s", code, stderr, stdout)
	}
	for name := range schemas() {
		if !before[name] {
			t.Errorf("schema %s left behind", name)
		}
	}
	if !publicBefore && inPublic() {
		t.Errorf("the benchmark created its tables in the public schema")
	}
}
