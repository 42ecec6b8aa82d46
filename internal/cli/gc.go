package cli

import (
	"os"
	"runtime/debug"
)

// gcPercent is the collector's GOGC in an engine process that was not
// given one.
const gcPercent = 400

// TuneGC sets the collector's GOGC to gcPercent unless the environment sets
// GOGC. An engine keeps little live heap (a few MB with hundreds of runs
// resident), so at the default of 100 it collects whenever it has
// allocated that much again: 60 times a second under load, each cycle
// scanning the stack of every resident run's goroutine and leaving them
// shrunk, to be grown again by the next step. At 400 it collects a fourth
// as often, for a heap a few MB larger: a third less CPU per attempt
// (docs/benchmarks.md). Programs that embed the engine choose their own.
func TuneGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(gcPercent)
	}
}
