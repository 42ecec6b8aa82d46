package sqlite

import (
	"path/filepath"
	"testing"
)

// TestSynchronousDefault pins the durability a zero Options gives: WAL
// with synchronous=NORMAL, and FULL when asked for.
func TestSynchronousDefault(t *testing.T) {
	t.Parallel()
	for opt, want := range map[string]int{"": 1, "NORMAL": 1, "full": 2} {
		s, err := Open(t.Context(), filepath.Join(t.TempDir(), "reprise.db"), &Options{Synchronous: opt})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		var got int
		var mode string
		err = s.write(t.Context(), func(tx *txn) error {
			if err := tx.queryRow("PRAGMA synchronous").Scan(&got); err != nil {
				return err
			}
			return tx.queryRow("PRAGMA journal_mode").Scan(&mode)
		})
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got != want || mode != "wal" {
			t.Fatalf("Synchronous %q: synchronous = %d, journal_mode = %s; want %d, wal", opt, got, mode, want)
		}
	}
}

// TestCloseTwice: a second Close returns what the first did, and panics
// not, as a store closed by a helper and again by its caller would.
func TestCloseTwice(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "reprise.db"), nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close again: %v", err)
	}
}
