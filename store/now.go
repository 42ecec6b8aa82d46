package store

import "time"

// Now is the time of a transition as its store keeps time. The rules of
// this package take it to stamp what they decide: a lease's end, a retry's
// time, a timer's.
type Now struct {
	// At is the transition's time.
	At time.Time
	// Precision is the finest time the store keeps: the times computed
	// from At are cut to it, so that what a rule returns is what the
	// store reads back. Zero keeps nanoseconds.
	Precision time.Duration
}

// Add returns At+d, cut to the store's precision.
func (n Now) Add(d time.Duration) time.Time {
	return n.At.Add(d).Truncate(n.Precision)
}
