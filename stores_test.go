package reprise_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"reprise"
	"reprise/clock"
	"reprise/memory"
	"reprise/postgres"
	"reprise/reprisetest"
	"reprise/sqlite"
	"reprise/store"
)

// The engine's tests run on SQLite, or on the store REPRISE_TEST_STORE
// names: "memory", or "postgres" (at REPRISE_TEST_POSTGRES, in a schema of
// each test's own). CI runs them on all three. Tests of what only a file
// can show (crashes of real processes, examples) open SQLite themselves.

// testStore opens a store of the kind the run asks for, on the clock now
// (nil: the store's own), closed and dropped when the test ends.
func testStore(t *testing.T, now func() time.Time) store.Store {
	t.Helper()
	kind := os.Getenv("REPRISE_TEST_STORE")
	for _, k := range storeKinds() {
		if k.name == kind || kind == "" && k.name == "sqlite" {
			return k.open(t, now)
		}
	}
	t.Fatalf("REPRISE_TEST_STORE=%q: want sqlite, memory or postgres (with REPRISE_TEST_POSTGRES set)", kind)
	return nil
}

// newEnv is reprisetest.New on testStore.
func newEnv(t *testing.T, cfg *reprise.Config, defs ...reprise.Definition) *reprisetest.Env {
	t.Helper()
	c := clock.NewFake(reprisetest.Start)
	return reprisetest.NewOn(t, testStore(t, c.Now), c, cfg, defs...)
}

// tempStore is testStore on the store's own clock.
func tempStore(t *testing.T) store.Store {
	t.Helper()
	return testStore(t, nil)
}

// fakeStore is testStore on a fake clock, which it returns with it.
func fakeStore(t *testing.T) (*clock.Fake, store.Store) {
	t.Helper()
	c := clock.NewFake(reprisetest.Start)
	return c, testStore(t, c.Now)
}

// A storeKind opens a store of one kind for a test, closed (and dropped)
// when the test ends.
type storeKind struct {
	name string
	open func(t *testing.T, now func() time.Time) store.Store
}

var schemas atomic.Int64

// storeKinds are the stores an engine test may run on: SQLite and the
// in-memory store always, PostgreSQL when REPRISE_TEST_POSTGRES is set.
func storeKinds() []storeKind {
	kinds := []storeKind{
		{"sqlite", func(t *testing.T, now func() time.Time) store.Store {
			st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "reprise.db"), &sqlite.Options{Now: now})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		}},
		{"memory", func(t *testing.T, now func() time.Time) store.Store {
			st := memory.New(memory.Options{Now: now})
			t.Cleanup(func() { st.Close() })
			return st
		}},
	}
	if dsn := os.Getenv("REPRISE_TEST_POSTGRES"); dsn != "" {
		kinds = append(kinds, storeKind{"postgres", func(t *testing.T, now func() time.Time) store.Store {
			schema := fmt.Sprintf("reprise_test_%d_%d", time.Now().UnixNano(), schemas.Add(1))
			st, err := postgres.Open(t.Context(), dsn, &postgres.Options{Schema: schema, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				st.Close()
				dropSchema(t, schema)
			})
			return st
		}})
	}
	return kinds
}
