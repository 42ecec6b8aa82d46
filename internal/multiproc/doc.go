// Package multiproc tests reprise with several engine processes sharing one
// PostgreSQL database: processes killed with SIGKILL, a server restarted
// under load, and the throughput of 1, 2 and 4 processes. It holds tests
// only; the engine processes are this package's test binary, run again.
package multiproc
