// Package proccpu reads the CPU time processes have used from /proc, so that a
// benchmark can report what an attempt cost each process beside its
// throughput: on a shared machine throughput moves with the neighbours, CPU
// per attempt much less. Off Linux, or without /proc, every figure is zero.
package proccpu

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of /proc's CPU times on every Linux this runs on.
const userHZ = 100

// PID returns the user and system time process pid has used so far.
func PID(pid int) time.Duration {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	_, cpu := parseStat(string(b))
	return cpu
}

// Comm returns the user and system time used so far by the live
// processes named comm (the server's, for "postgres").
func Comm(comm string) time.Duration {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var total time.Duration
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // ended meanwhile
		}
		if name, cpu := parseStat(string(b)); name == comm {
			total += cpu
		}
	}
	return total
}

// parseStat returns the command name and the user plus system time of a
// /proc/PID/stat line: "pid (comm) state ... utime stime ...", where comm
// may itself hold spaces and parentheses.
func parseStat(line string) (comm string, cpu time.Duration) {
	open, end := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 0 || end < open {
		return "", 0
	}
	fields := strings.Fields(line[end+1:])
	if len(fields) < 13 {
		return "", 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return line[open+1 : end], time.Duration(utime+stime) * time.Second / userHZ
}
