package sqlite_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"reprise/sqlite"
)

// TestLockChild is the other process of TestExclusive: it opens the
// database with Exclusive and says how that went.
func TestLockChild(t *testing.T) {
	t.Parallel()
	path := os.Getenv("REPRISE_LOCK_CHILD")
	if path == "" {
		t.Skip("only runs as the child of TestExclusive")
	}
	s, err := sqlite.Open(t.Context(), path, &sqlite.Options{Exclusive: true})
	switch {
	case errors.Is(err, sqlite.ErrLocked):
		fmt.Printf("locked: %v\n", err)
	case err != nil:
		fmt.Printf("error: %v\n", err)
	default:
		s.Close()
		fmt.Println("opened")
	}
}

// openInChild opens path with Exclusive in another process.
func openInChild(t *testing.T, path string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "REPRISE_LOCK_CHILD="+path)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v %s", err, out)
	}
	return string(out)
}

// TestExclusive: a store opened with Exclusive keeps other processes'
// Exclusive opens out until it closes; in its own process, and to plain
// opens, the database stays open.
func TestExclusive(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "reprise.db")
	first, err := sqlite.Open(t.Context(), path, &sqlite.Options{Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	if out := openInChild(t, path); !strings.HasPrefix(out, "locked: ") ||
		!strings.Contains(out, fmt.Sprintf("process %d holds %s.lock", os.Getpid(), path)) {
		t.Fatalf("another process's open: %q", out)
	}
	// The same process shares the lock, by another name of the file too.
	link := filepath.Join(dir, "link.db")
	if err := os.Symlink(path+".lock", link+".lock"); err != nil {
		t.Fatal(err)
	}
	second, err := sqlite.Open(t.Context(), link, &sqlite.Options{Exclusive: true})
	if err != nil {
		t.Fatalf("second open in the process: %v", err)
	}
	second.Close()
	reader, err := sqlite.Open(t.Context(), path, nil)
	if err != nil {
		t.Fatalf("open without Exclusive: %v", err)
	}
	reader.Close()
	// Closing the second store left the first one's lock.
	if out := openInChild(t, path); !strings.HasPrefix(out, "locked: ") {
		t.Fatalf("after the second store closed, another process's open: %q", out)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if out := openInChild(t, path); !strings.HasPrefix(out, "opened\n") {
		t.Fatalf("after Close, another process's open: %q", out)
	}
	mem, err := sqlite.Open(t.Context(), ":memory:", &sqlite.Options{Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	mem.Close()
	if _, err := os.Stat(":memory:.lock"); err == nil {
		t.Error("a lock file for :memory:")
	}
}
