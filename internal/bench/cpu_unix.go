//go:build unix

package bench

import (
	"syscall"
	"time"
)

// CPUTime is the CPU time the process has used, user and system: what a
// run costs, whatever else the machine is doing. Zero where it cannot be
// read.
func CPUTime() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
