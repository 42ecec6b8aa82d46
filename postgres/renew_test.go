package postgres_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"reprise/postgres"
	"reprise/store"
)

// TestRenewAroundHeldRun renews an owner's runs while another transaction
// holds one of them: the others are renewed at once, without waiting for
// it, and the held one once it is free.
func TestRenewAroundHeldRun(t *testing.T) {
	t.Parallel()
	dsn, schema := testSchema(t)
	s := openOn(t, dsn, &postgres.Options{Schema: schema})
	ctx := t.Context()
	for _, id := range []string{"a", "b", "c"} {
		if _, _, err := s.RunCreate(ctx, &store.RunCreateParams{ID: id, Workflow: "wf", Owner: "e1", LeaseTTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	conn := connect(t, dsn)
	leases := func() map[string]time.Duration {
		t.Helper()
		rows, err := conn.Query(ctx, "SELECT id, lease_until - now() FROM "+schema+".reprise_run")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]time.Duration{}
		for rows.Next() {
			var (
				id   string
				left time.Duration
			)
			if err := rows.Scan(&id, &left); err != nil {
				t.Fatal(err)
			}
			got[id] = left
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return got
	}
	holder := connect(t, dsn)
	if _, err := holder.Exec(ctx, "BEGIN; SELECT 1 FROM "+schema+".reprise_run WHERE id = 'b' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.RunRenew(ctx, &store.RunRenewParams{Owner: "e1", LeaseTTL: time.Hour}) }()
	waitFor(t, func() bool {
		l := leases()
		return l["a"] > 50*time.Minute && l["c"] > 50*time.Minute
	})
	if l := leases(); l["b"] > 2*time.Minute {
		t.Fatalf("the held run was renewed while held: %v", l["b"])
	}
	// The renewal waits for b, gives way, and tries again: wait until a
	// transaction of it that began after the first one waits for b.
	blocked := func() (xactStart time.Time, ok bool) {
		t.Helper()
		err := conn.QueryRow(ctx, `
			SELECT xact_start FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND $1::int = ANY(pg_blocking_pids(pid))`,
			int(holder.PgConn().PID())).Scan(&xactStart)
		if errors.Is(err, pgx.ErrNoRows) {
			return time.Time{}, false
		}
		if err != nil {
			t.Fatal(err)
		}
		return xactStart, true
	}
	var first time.Time
	waitFor(t, func() bool {
		var ok bool
		first, ok = blocked()
		return ok
	})
	waitFor(t, func() bool {
		again, ok := blocked()
		return ok && again.After(first)
	})
	if _, err := holder.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if l := leases(); l["b"] < 50*time.Minute {
		t.Errorf("the held run's lease after the renewal: %v left, want about an hour", l["b"])
	}
}
