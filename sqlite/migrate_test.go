package sqlite_test

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver, to reach behind the store

	"reprise/sqlite"
	"reprise/store"
)

// userVersion reads or, with set >= 0, writes the schema version of the
// database file at path.
func userVersion(t *testing.T, path string, set int) int {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if set >= 0 {
		if _, err := db.Exec(`PRAGMA user_version = ` + strconv.Itoa(set)); err != nil {
			t.Fatal(err)
		}
	}
	var v int
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestMigrateReopenKeepsData(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "reprise.db")
	s, err := sqlite.Open(t.Context(), path, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	_, _, err = s.RunCreate(t.Context(), &store.RunCreateParams{ID: "run-1", Workflow: "w", Input: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	version := userVersion(t, path, -1)
	if version < 1 {
		t.Fatalf("user_version = %d after Open, want the schema's version", version)
	}

	s, err = sqlite.Open(t.Context(), path, nil)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	if _, err := s.RunGet(t.Context(), "run-1"); err != nil {
		t.Fatalf("RunGet after reopening: %v", err)
	}
	if v := userVersion(t, path, -1); v != version {
		t.Fatalf("user_version = %d after reopening, want %d", v, version)
	}
}

func TestMigrateRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "reprise.db")
	s, err := sqlite.Open(t.Context(), path, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	s.Close()
	userVersion(t, path, 1000)

	_, err = sqlite.Open(t.Context(), path, &sqlite.Options{Now: time.Now})
	if !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("Open of a newer schema: err = %v, want ErrSchemaTooNew", err)
	}
	if v := userVersion(t, path, -1); v != 1000 {
		t.Fatalf("user_version = %d, want it left at 1000", v)
	}
}

func TestOpenValidatesOptions(t *testing.T) {
	t.Parallel()
	_, err := sqlite.Open(t.Context(), ":memory:", &sqlite.Options{Synchronous: "SOMETIMES", BusyTimeout: -1})
	if err == nil {
		t.Fatal("Open with bad options: no error")
	}
	for _, want := range []string{"Synchronous", "BusyTimeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not name %s", err, want)
		}
	}
}

// TestMigrateFromVersion1 opens a database of schema 1 with a run, its
// history and a task in it: Open migrates it to this version, all three
// read as before, with the new fields zero, and the history goes on after
// the rows of single events that version 1 wrote.
func TestMigrateFromVersion1(t *testing.T) {
	t.Parallel()
	const version = 11
	if v := sqlite.SchemaVersion(); v != version {
		t.Fatalf("SchemaVersion = %d, want %d", v, version)
	}
	path := filepath.Join(t.TempDir(), "reprise.db")
	init, err := os.ReadFile("migrations/0001_init.sql")
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		string(init),
		`INSERT INTO runs (id, workflow, status, input, created_at) VALUES ('run-1', 'order', 'running', '{}', 1)`,
		`INSERT INTO events (run_id, seq, execution, type, at, body) VALUES
			('run-1', 1, 1, 'RunStarted', 1, '{"type":"RunStarted","workflow":"order","input":{}}'),
			('run-1', 2, 1, 'StepScheduled', 1, '{"type":"StepScheduled","position":1,"step":"charge"}')`,
		`INSERT INTO tasks (run_id, execution, position, step, idempotency_key, ready_at) VALUES ('run-1', 1, 1, 'charge', 'k', 1)`,
		`PRAGMA user_version = 1`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%.40s: %v", q, err)
		}
	}
	db.Close()

	s, err := sqlite.Open(t.Context(), path, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	if v := userVersion(t, path, -1); v != version {
		t.Fatalf("user_version = %d, want %d", v, version)
	}
	run, err := s.RunGet(t.Context(), "run-1")
	if err != nil || run.ParentID != "" || run.Status != store.RunRunning {
		t.Fatalf("RunGet = %+v, %v", run, err)
	}
	tasks, err := s.TaskClaim(t.Context(), &store.TaskClaimParams{
		Owner: "w", Steps: []store.StepQuota{{Name: "charge", Limit: 1}}, LeaseTTL: time.Minute, Keep: true,
	})
	if err != nil || len(tasks) != 1 || tasks[0].Attempt != 1 || tasks[0].Base != 0 || tasks[0].Lapses != 0 {
		t.Fatalf("TaskClaim = %+v, %v; want the old task as attempt 1", tasks, err)
	}
	events, err := s.HistoryList(t.Context(), &store.HistoryListParams{RunID: "run-1", AfterSeq: 1})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range events {
		got = append(got, fmt.Sprintf("%d %s %d %s", e.Seq, e.Type, e.Execution, e.Step))
	}
	want := []string{"2 StepScheduled 1 charge", "3 AttemptStarted 1 charge"}
	if !slices.Equal(got, want) {
		t.Fatalf("history after seq 1 = %q, want %q", got, want)
	}
}

// TestMigrateKeepsRunLeases opens a database of schema 10, whose runs each
// had their own lease: after the move to one lease per owner, a lease
// held still holds until the latest of its owner's lapse times, and a
// lapsed one is claimed at once.
func TestMigrateKeepsRunLeases(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "reprise.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	var qs []string
	for _, f := range files[:10] {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		qs = append(qs, string(b))
	}
	const minute = int64(time.Minute)
	qs = append(qs,
		`INSERT INTO runs (id, workflow, status, owner, lease_until, token, created_at) VALUES
			('held-1', 'order', 'running', 'e1', 1*`+strconv.FormatInt(minute, 10)+`, 1, 1),
			('held-2', 'order', 'running', 'e1', 2*`+strconv.FormatInt(minute, 10)+`, 1, 2),
			('lapsed', 'order', 'running', 'e2', 1, 1, 3),
			('free', 'order', 'pending', '', 0, 0, 4)`,
		`INSERT INTO events (run_id, seq, execution, type, at, body)
			SELECT id, 1, 1, 'RunStarted', created_at, '{"type":"RunStarted","workflow":"order"}' FROM runs`,
		`PRAGMA user_version = 10`)
	for _, q := range qs {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%.40s: %v", q, err)
		}
	}
	db.Close()

	now := time.Unix(0, minute+1) // after held-1's own lapse time, before held-2's
	s, err := sqlite.Open(t.Context(), path, &sqlite.Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	claim := func() []string {
		t.Helper()
		leases, err := s.RunClaim(t.Context(), &store.RunClaimParams{Owner: "e3", Limit: 10, LeaseTTL: time.Hour})
		if err != nil {
			t.Fatalf("RunClaim: %v", err)
		}
		var ids []string
		for _, l := range leases {
			ids = append(ids, l.Run.ID)
		}
		return ids
	}
	if got, want := claim(), []string{"lapsed", "free"}; !slices.Equal(got, want) {
		t.Fatalf("claimed %q, want %q", got, want)
	}
	now = time.Unix(0, 2*minute)
	if got, want := claim(), []string{"held-1", "held-2"}; !slices.Equal(got, want) {
		t.Fatalf("claimed %q once e1's lease lapsed, want %q", got, want)
	}
}
