package cli

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // the database/sql driver, to reach behind the store

	"reprise/postgres"
	"reprise/sqlite"
	"reprise/store"
)

func TestMigrateSQLite(t *testing.T) {
	t.Parallel()
	for _, form := range []string{"bare", "sqlite:"} {
		t.Run(form, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "reprise.db")
			db := path
			if form == "sqlite:" {
				db = "sqlite:" + path
			}
			want := fmt.Sprintf("sqlite %s: schema version %d\n", path, sqlite.SchemaVersion())
			for range 2 { // creates, then finds nothing to do
				stdout, stderr, code := runMain("migrate", "--db", db)
				if code != exitOK || stdout != want || stderr != "" {
					t.Fatalf("migrate: code %d, stdout %q, stderr %q; want 0, %q", code, stdout, stderr, want)
				}
			}
			if v := sqliteUserVersion(t, path, -1); v != sqlite.SchemaVersion() {
				t.Fatalf("user_version %d, want %d", v, sqlite.SchemaVersion())
			}

			newer := sqlite.SchemaVersion() + 1
			sqliteUserVersion(t, path, newer)
			stdout, stderr, code := runMain("migrate", "--db", db)
			if code != exitFail || stdout != "" || !strings.Contains(stderr, "migrated by a newer reprise") {
				t.Fatalf("migrate a newer database: code %d, stdout %q, stderr %q", code, stdout, stderr)
			}
			if v := sqliteUserVersion(t, path, -1); v != newer {
				t.Fatalf("user_version %d after a refused migrate, want %d left as it was", v, newer)
			}
		})
	}
}

func TestMigrateBadArguments(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"migrate", "--db", filepath.Join(dir, "a.db"), "extra"},
		{"migrate", "--nope"},
	} {
		if _, _, code := runMain(args...); code != exitUsage {
			t.Errorf("%q: code %d, want %d", args, code, exitUsage)
		}
	}
	if _, stderr, code := runMain("migrate", "--db", filepath.Join(dir, "b.db"), "--schema", "x"); code != exitFail || !strings.Contains(stderr, "PostgreSQL only") {
		t.Errorf("--schema with SQLite: code %d, stderr %q", code, stderr)
	}
}

// testSchema returns the test server's DSN, a schema name of the test's
// own, dropped when it ends, and a connection to look behind the store;
// it skips the test without REPRISE_TEST_POSTGRES.
func testSchema(t *testing.T, prefix string) (dsn, schema string, conn *pgx.Conn) {
	t.Helper()
	dsn = os.Getenv("REPRISE_TEST_POSTGRES")
	if dsn == "" {
		t.Skip("REPRISE_TEST_POSTGRES is not set (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable)")
	}
	schema = fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano()%1e9)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(t.Context())
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			t.Error(err)
		}
		conn.Close(ctx)
	})
	return dsn, schema, conn
}

func TestMigratePostgres(t *testing.T) {
	t.Parallel()
	dsn, schema, conn := testSchema(t, "reprise_cli_migrate")

	want := fmt.Sprintf("postgres schema %q: schema version %d\n", schema, postgres.SchemaVersion())
	for range 2 {
		stdout, stderr, code := runMain("migrate", "--db", dsn, "--schema", schema)
		if code != exitOK || stdout != want || stderr != "" {
			t.Fatalf("migrate: code %d, stdout %q, stderr %q; want 0, %q", code, stdout, stderr, want)
		}
	}
	var version int
	if err := conn.QueryRow(t.Context(), "SELECT max(version) FROM "+schema+".reprise_migration").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version != postgres.SchemaVersion() {
		t.Fatalf("recorded version %d, want %d", version, postgres.SchemaVersion())
	}

	newer := postgres.SchemaVersion() + 1
	if _, err := conn.Exec(t.Context(), "INSERT INTO "+schema+".reprise_migration (version, name) VALUES ($1, 'from_the_future.sql')", newer); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runMain("migrate", "--db", dsn, "--schema", schema)
	if code != exitFail || stdout != "" || !strings.Contains(stderr, "migrated by a newer reprise") {
		t.Fatalf("migrate a newer schema: code %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// sqliteUserVersion reads or, with set >= 0, writes the schema version of
// the SQLite database at path.
func sqliteUserVersion(t *testing.T, path string, set int) int {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if set >= 0 {
		if _, err := db.Exec("PRAGMA user_version = " + strconv.Itoa(set)); err != nil {
			t.Fatal(err)
		}
	}
	var v int
	if err := db.QueryRow("PRAGMA user_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestDSNSchema(t *testing.T) {
	t.Parallel()
	for dsn, want := range map[string]string{
		"postgres://u@h:5432/db":                                  "",
		"postgres://u@h:5432/db?sslmode=disable&search_path=jobs": "jobs",
		`postgres://u@h/db?search_path=%22Jobs%22`:                "Jobs",
		"host=h dbname=db search_path=jobs":                       "jobs",
	} {
		if got, err := dsnSchema(dsn); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", dsn, got, err, want)
		}
	}
	for _, dsn := range []string{"postgres://u@h/db?search_path=a,b", "postgres://u@h:notaport/db"} {
		if got, err := dsnSchema(dsn); err == nil {
			t.Errorf("%s: %q, want an error", dsn, got)
		}
	}
}

// TestPostgresSchemaInDSN: every command that takes --db keeps to the
// schema its URL's search_path names.
func TestPostgresSchemaInDSN(t *testing.T) {
	t.Parallel()
	dsn, schema, _ := testSchema(t, "reprise_cli_dsn")
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	db := dsn + sep + "search_path=" + schema

	want := fmt.Sprintf("postgres schema %q: schema version %d\n", schema, postgres.SchemaVersion())
	if stdout, stderr, code := runMain("migrate", "--db", db); code != exitOK || stdout != want {
		t.Fatalf("migrate: code %d, stdout %q, stderr %q; want 0, %q", code, stdout, stderr, want)
	}
	st, err := postgres.Open(t.Context(), dsn, &postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = st.RunCreate(t.Context(), &store.RunCreateParams{ID: "in-" + schema, Workflow: "wf", Input: []byte("1")})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	if stdout, stderr, code := runMain("runs", "--db", db); code != exitOK || !strings.Contains(stdout, "in-"+schema) {
		t.Fatalf("runs: code %d, stdout %q, stderr %q; want the run created in %s", code, stdout, stderr, schema)
	}
	if _, stderr, code := runMain("migrate", "--db", db, "--schema", schema+"_other"); code != exitFail || !strings.Contains(stderr, "different schemas") {
		t.Errorf("migrate with another --schema: code %d, stderr %q", code, stderr)
	}
}
