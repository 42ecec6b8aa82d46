//go:build !unix

package bench

import "time"

// CPUTime is zero: this system's process CPU time is not read.
func CPUTime() time.Duration { return 0 }
