package cli

import (
	"os"
	"runtime/debug"
)

// gcPercent is the collector's GOGC in an engine process that was not
// given one.
const gcPercent = 400

// gcMemoryLimit is the soft memory limit of an engine process that was
// not given one (GOMEMLIMIT).
const gcMemoryLimit = 384 << 20

// TuneGC sets the collector's GOGC to gcPercent and its soft memory limit
// to gcMemoryLimit, each unless the environment sets it. An engine keeps
// little live heap (a few MB with hundreds of runs resident), so at the
// default GOGC of 100 it collects whenever it has allocated that much
// again: many times a second under load, each cycle scanning the stack of
// every resident run's goroutine and leaving them shrunk, to be grown
// again by the next step. At 400 it collects a fourth as often, for a
// heap a few MB larger: a third less CPU per attempt (docs/benchmarks.md).
// But an engine that keeps a million runs parked holds a hundred MB or
// more, and five times that would be its heap; the limit makes the
// collector run sooner there, so that memory stays bounded by the runs,
// not by the collector's pace. A live heap past the limit costs CPU, not
// a crash: the runtime caps the collector's share. Programs that embed
// the engine choose their own.
func TuneGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(gcPercent)
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		debug.SetMemoryLimit(gcMemoryLimit)
	}
}
