package proccpu

import (
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	t.Parallel()
	// A comm may hold spaces and parentheses; utime and stime are the 14th
	// and 15th fields.
	comm, cpu := parseStat("42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 130 0 0 20 0 1 0")
	if comm != "a (b) c" || cpu != 3800*time.Millisecond {
		t.Errorf("parseStat = %q, %v; want \"a (b) c\", 3.8s", comm, cpu)
	}
	if comm, cpu := parseStat("garbage"); comm != "" || cpu != 0 {
		t.Errorf("parseStat(garbage) = %q, %v", comm, cpu)
	}
}
