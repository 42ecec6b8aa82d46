package postgres_test

import (
	"errors"
	"sync"
	"testing"

	"reprise"
	"reprise/postgres"
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

	if _, err := postgres.Open(t.Context(), dsn, opts); !errors.Is(err, reprise.ErrSchemaTooNew) {
		t.Errorf("Open: got %v, want ErrSchemaTooNew", err)
	}
	if err := postgres.Migrate(t.Context(), dsn, opts); !errors.Is(err, reprise.ErrSchemaTooNew) {
		t.Errorf("Migrate: got %v, want ErrSchemaTooNew", err)
	}
	noMigrate := &postgres.Options{Schema: schema, NoMigrate: true}
	if _, err := postgres.Open(t.Context(), dsn, noMigrate); !errors.Is(err, reprise.ErrSchemaTooNew) {
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
	if errors.Is(err, reprise.ErrSchemaTooNew) {
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
	if _, _, err := s.RunCreate(t.Context(), &reprise.RunCreateParams{ID: "r", Workflow: "wf"}); err != nil {
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
