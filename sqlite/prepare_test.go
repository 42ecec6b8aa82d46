package sqlite

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"reprise/store"
)

// TestStatementsPreparedOnce runs the store's calls round after round with
// new times, ids and limits, and checks that SQLite prepared none of the
// writer's statements again. SQLite re-prepares a statement when a bound
// value could change its plan: a LIMIT parameter did so for every claim,
// and a join on the task id for every failed attempt, each time costing
// more than running the statement.
func TestStatementsPreparedOnce(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "p.db"), &Options{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	for round := range 6 {
		id := fmt.Sprintf("run-%d", round)
		lease, _, err := s.RunCreate(ctx, &store.RunCreateParams{ID: id, Workflow: "w", Owner: "e", LeaseTTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.RunAdvance(ctx, &store.RunAdvanceParams{RunID: id, Token: lease.Token, Steps: []store.StepSpec{
			{Position: 1, Name: "s", IdempotencyKey: "k1"},
			{Position: 2, Name: "s", IdempotencyKey: "k2", Lease: true},
		}, LeaseOwner: "e", LeaseTTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		tasks, err := s.TaskClaim(ctx, &store.TaskClaimParams{
			Owner: "e", Steps: []store.StepQuota{{Name: "s", Limit: 5 + round}}, LeaseTTL: time.Minute,
		})
		if err != nil || len(tasks) == 0 {
			t.Fatalf("round %d: TaskClaim = %d tasks, %v", round, len(tasks), err)
		}
		advance(time.Second)
		if _, err := s.TaskFail(ctx, &store.TaskFailParams{TaskID: tasks[0].ID, Token: tasks[0].Token, Retry: true,
			Error: store.ErrorInfo{Type: "Transient", Message: "again"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.TaskListExpired(ctx, &store.TaskListExpiredParams{Limit: 10 + round}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RunClaim(ctx, &store.RunClaimParams{Owner: "f", Limit: 3 + round, LeaseTTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RunList(ctx, &store.RunListParams{Status: store.RunRunning, Limit: 20 + round}); err != nil {
			t.Fatal(err)
		}
		advance(time.Second)
	}

	var again []string
	check := func(c *conn) {
		for query, st := range c.stmts {
			// Once is the migration's change of the schema under BEGIN.
			if n := sqlite3.Xsqlite3_stmt_status(c.tls, st.p, sqlite3.SQLITE_STMTSTATUS_REPREPARE, 0); n > 1 {
				again = append(again, fmt.Sprintf("%d times: %s", n, strings.Join(strings.Fields(query), " ")))
			}
		}
	}
	check(s.commit.conn)
	select { // the reads, one at a time, took one connection
	case c := <-s.readers.idle:
		check(c)
		s.readers.put(c)
	default:
		t.Error("no read connection to check")
	}
	if len(again) > 0 {
		t.Errorf("statements prepared again:\n%s", strings.Join(again, "\n"))
	}
}
