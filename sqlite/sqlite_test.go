package sqlite_test

import (
	"path/filepath"
	"testing"
	"time"

	"reprise/sqlite"
	"reprise/store"
	"reprise/storetest"
)

func TestStoreFile(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
		return open(t, filepath.Join(t.TempDir(), "reprise.db"), now)
	})
}

func TestStoreMemory(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
		return open(t, ":memory:", now)
	})
}

// open opens a store that t closes. Tests do not need power-loss
// durability: synchronous is OFF.
func open(t *testing.T, path string, now func() time.Time) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), path, &sqlite.Options{Now: now, Synchronous: "OFF"})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestEngines(t *testing.T) {
	t.Parallel()
	storetest.Engines(t, func(t *testing.T) (store.Store, store.Store) {
		path := filepath.Join(t.TempDir(), "reprise.db")
		first, err := sqlite.Open(t.Context(), path, &sqlite.Options{Synchronous: "OFF"})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return first, open(t, path, nil)
	})
}
