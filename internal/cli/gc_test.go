package cli

import (
	"math"
	"os"
	"runtime/debug"
	"testing"
)

// TestTuneGC checks that TuneGC sets GOGC and the memory limit, and leaves
// those the environment sets alone.
func TestTuneGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))

	for _, v := range []string{"GOGC", "GOMEMLIMIT"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	TuneGC()
	if got := debug.SetGCPercent(100); got != gcPercent {
		t.Errorf("without GOGC: percent %d, want %d", got, gcPercent)
	}
	if got := debug.SetMemoryLimit(math.MaxInt64); got != gcMemoryLimit {
		t.Errorf("without GOMEMLIMIT: limit %d, want %d", got, gcMemoryLimit)
	}

	t.Setenv("GOGC", "100")
	t.Setenv("GOMEMLIMIT", "1GiB")
	TuneGC()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC=100: percent %d, want 100", got)
	}
	if got := debug.SetMemoryLimit(math.MaxInt64); got != math.MaxInt64 {
		t.Errorf("with GOMEMLIMIT set: limit %d, want it left alone", got)
	}
}
