package cli

import (
	"strings"
	"testing"
)

// TestBench runs every workload of reprise bench, small, and checks that
// each prints its figure; bad flags change nothing and say what is wrong.
func TestBench(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := runMain("bench", "--runs", "30", "--lateness", "20", "--parked", "20")
	if code != exitOK || stderr != "" {
		t.Fatalf("bench: code %d, stderr %q", code, stderr)
	}
	for _, want := range []string{
		"1 run at a time:", "64 runs at a time:", "failing twice", "30 runs in",
		"20 retries: lateness p50", "waking from 1 ms sleeps:", "20 runs parked in backoff",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("bench output lacks %q:\n%s", want, stdout)
		}
	}
	for _, args := range [][]string{{"bench", "--runs", "0"}, {"bench", "--parked", "-1"}, {"bench", "extra"}} {
		stdout, stderr, code := runMain(args...)
		if code != exitUsage || stdout != "" || stderr == "" {
			t.Errorf("%q: code %d, stdout %q, stderr %q; want a usage error", args, code, stdout, stderr)
		}
	}
}
