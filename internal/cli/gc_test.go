package cli

import (
	"os"
	"runtime/debug"
	"testing"
)

// TestTuneGC checks that TuneGC sets GOGC to gcPercent, and leaves one the
// environment sets alone.
func TestTuneGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))

	t.Setenv("GOGC", "")
	os.Unsetenv("GOGC")
	TuneGC()
	if got := debug.SetGCPercent(100); got != gcPercent {
		t.Errorf("without GOGC: percent %d, want %d", got, gcPercent)
	}

	t.Setenv("GOGC", "100")
	TuneGC()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC=100: percent %d, want 100", got)
	}
}
