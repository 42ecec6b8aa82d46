package proccpu

import (
	"os"
	"syscall"
	"testing"
	"time"
)

func TestPIDCountsThisProcess(t *testing.T) {
	t.Parallel() // other tests' CPU only adds to this process's
	before := PID(os.Getpid())
	// Busy until the process has used 100 ms more CPU by the kernel's
	// count, however long a loaded machine keeps it waiting for a core.
	for spent := rusage(t); rusage(t)-spent < 100*time.Millisecond; {
	}
	if after := PID(os.Getpid()); after <= before {
		t.Errorf("CPU %v after a busy loop, %v before", after, before)
	}
}

// rusage returns the CPU this process has used, as getrusage counts it.
func rusage(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
