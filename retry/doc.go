// Package retry holds reprise's retry policies: the rules that say how often a
// step may be attempted, after which errors, with what backoff, under what
// per-attempt timeout and total deadline, and the pure function that applies
// them to a failed attempt.
//
// A policy can be written in Go, in the one-line text form
// ("[retry: 3, backoff: 1s] [timeout: 30s]"), or in the JSON shapes other
// engines use. Nothing here reads a clock or the environment: the same inputs
// always give the same decision, which is what lets reprise replay a history.
package retry
