package sqlite_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"reprise/sqlite"
	"reprise/store"
)

// crashChildEnv names the database the child process of
// TestKillLosesNoAcknowledgedWrite writes to.
const crashChildEnv = "REPRISE_SQLITE_CRASH_CHILD"

// TestKillLosesNoAcknowledgedWrite kills a process that writes through
// group commit with SIGKILL, mid-stream, and requires every write it had
// acknowledged to be in the database when it is opened again.
func TestKillLosesNoAcknowledgedWrite(t *testing.T) {
	if path := os.Getenv(crashChildEnv); path != "" {
		crashChild(t, path)
		return
	}
	t.Parallel()
	path := filepath.Join(t.TempDir(), "reprise.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillLosesNoAcknowledgedWrite$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acked []string
	lines := bufio.NewScanner(out)
	for lines.Scan() && len(acked) < 300 {
		if id, ok := strings.CutPrefix(lines.Text(), "acked "); ok {
			acked = append(acked, id)
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if len(acked) < 300 {
		t.Fatalf("child acknowledged %d writes before it stopped, want 300", len(acked))
	}

	s, err := sqlite.Open(t.Context(), path, nil)
	if err != nil {
		t.Fatalf("reopen after kill: %v", err)
	}
	defer s.Close()
	for _, id := range acked {
		events, err := s.HistoryList(t.Context(), &store.HistoryListParams{RunID: id})
		if err != nil {
			t.Fatalf("acknowledged run %s: %v", id, err)
		}
		if len(events) != 2 || events[1].Type != store.EventStepScheduled {
			t.Fatalf("acknowledged run %s has history %v, want RunStarted, StepScheduled", id, events)
		}
	}
}

// crashChild creates and advances runs from many goroutines, printing
// each run's id once both writes returned, until it is killed.
func crashChild(t *testing.T, path string) {
	s, err := sqlite.Open(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var n atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				id := fmt.Sprintf("run-%d", n.Add(1))
				lease, _, err := s.RunCreate(t.Context(), &store.RunCreateParams{
					ID: id, Workflow: "w", Input: json.RawMessage(`{}`), Owner: "e", LeaseTTL: time.Minute,
				})
				if err == nil {
					_, err = s.RunAdvance(t.Context(), &store.RunAdvanceParams{RunID: id, Token: lease.Token,
						Steps: []store.StepSpec{{Position: 1, Name: "s", IdempotencyKey: id}}})
				}
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				mu.Lock()
				fmt.Println("acked", id)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}
