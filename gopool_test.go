package reprise

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// BenchmarkGopoolAfterGC runs functions that need a 12 KB stack on a pool
// of 16 goroutines, with a collection after every 64 of them, as an engine
// collects while its goroutines wait for work. ns/op is per function.
func BenchmarkGopoolAfterGC(b *testing.B) {
	p := newGopool(time.Minute)
	var wg sync.WaitGroup
	for i := 0; i < b.N; i += 64 {
		for j := 0; j < 64; j += 16 {
			wg.Add(16)
			for range 16 {
				p.Go(func() { deepen(12); wg.Done() })
			}
			wg.Wait()
		}
		runtime.GC()
	}
}

// deepen uses about n KB of stack.
//
//go:noinline
func deepen(n int) byte {
	var frame [1 << 10]byte
	hold(frame[:])
	if n <= 1 {
		return frame[0]
	}
	return deepen(n-1) + frame[1]
}
