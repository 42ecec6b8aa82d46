package postgres_test

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"reprise/postgres"
	"reprise/store"
)

func TestMigrateRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	dsn, schema := testSchema(t)
	opts := &postgres.Options{Schema: schema}
	openOn(t, dsn, opts)

	if _, err := connect(t, dsn).Exec(t.Context(),
		"INSERT INTO "+schema+".reprise_migration (version, name) VALUES ($1, 'from_the_future.sql')",
		postgres.SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}

	if _, err := postgres.Open(t.Context(), dsn, opts); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Errorf("Open: got %v, want ErrSchemaTooNew", err)
	}
	if err := postgres.Migrate(t.Context(), dsn, opts); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Errorf("Migrate: got %v, want ErrSchemaTooNew", err)
	}
	noMigrate := &postgres.Options{Schema: schema, NoMigrate: true}
	if _, err := postgres.Open(t.Context(), dsn, noMigrate); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Errorf("Open with NoMigrate: got %v, want ErrSchemaTooNew", err)
	}
}

func TestOpenNoMigrateRefusesOlderSchema(t *testing.T) {
	t.Parallel()
	dsn, schema := testSchema(t)
	_, err := postgres.Open(t.Context(), dsn, &postgres.Options{Schema: schema, NoMigrate: true})
	if err == nil {
		t.Fatal("Open with NoMigrate on an empty schema: no error")
	}
	if errors.Is(err, store.ErrSchemaTooNew) {
		t.Errorf("Open with NoMigrate on an empty schema: %v", err)
	}
}

// TestMigrateConcurrently migrates one new schema from several goroutines
// at once, as processes starting together do.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	dsn, schema := newSchema(t) // Migrate creates it
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = postgres.Migrate(t.Context(), dsn, &postgres.Options{Schema: schema}) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Migrate %d: %v", i, err)
		}
	}
	s := openOn(t, dsn, &postgres.Options{Schema: schema, NoMigrate: true})
	if _, _, err := s.RunCreate(t.Context(), &store.RunCreateParams{ID: "r", Workflow: "wf"}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := connect(t, dsn).QueryRow(t.Context(), "SELECT count(*) FROM "+schema+".reprise_migration").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != postgres.SchemaVersion() {
		t.Errorf("%d migrations recorded, want %d", n, postgres.SchemaVersion())
	}
}

// TestKeysCompareAsBytes checks that every indexed text column has the "C"
// collation (schema version 5), whatever the database's default.
func TestKeysCompareAsBytes(t *testing.T) {
	t.Parallel()
	dsn, schema := testSchema(t)
	openOn(t, dsn, &postgres.Options{Schema: schema})
	rows, err := connect(t, dsn).Query(t.Context(), `
		SELECT DISTINCT c.relname || '.' || a.attname, coalesce(co.collname, '')
		FROM pg_index i
		JOIN pg_class c ON c.oid = i.indrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey)
		LEFT JOIN pg_collation co ON co.oid = a.attcollation
		WHERE n.nspname = $1 AND a.atttypid = 'text'::regtype`, schema)
	if err != nil {
		t.Fatal(err)
	}
	type column struct{ Name, Collation string }
	columns, err := pgx.CollectRows(rows, pgx.RowToStructByPos[column])
	if err != nil {
		t.Fatal(err)
	}
	if len(columns) < 8 {
		t.Fatalf("%d indexed text columns, want at least 8: %v", len(columns), columns)
	}
	for _, c := range columns {
		if c.Collation != "C" {
			t.Errorf("%s has collation %q, want C", c.Name, c.Collation)
		}
	}
}

// TestRunPagesKeepRoom checks that a run's page keeps half its room for the
// run's next versions (schema version 6), so that its appends are HOT.
func TestRunPagesKeepRoom(t *testing.T) {
	t.Parallel()
	dsn, schema := testSchema(t)
	openOn(t, dsn, &postgres.Options{Schema: schema})
	var options []string
	err := connect(t, dsn).QueryRow(t.Context(), `
		SELECT coalesce(c.reloptions, '{}') FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = 'reprise_run'`, schema).Scan(&options)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(options, "fillfactor=50") {
		t.Errorf("reprise_run options %q, want fillfactor=50", options)
	}
}
