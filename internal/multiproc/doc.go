// Package multiproc tests reprise with several engine processes sharing one
// PostgreSQL database: processes killed with SIGKILL, a server restarted
// under load, the throughput of 1, 2 and 4 processes, and the floor: what
// the database alone costs the same work in each layout of its writes. It
// holds tests only; the engine processes are this package's test binary,
// run again.
package multiproc
