package reprise

import (
	"time"

	"reprise/clock"
)

// A deadlineTimer can be set to fire at a time rather than after a
// duration. A clock.Fake's timers can: a duration read off a clock that a
// test moves meanwhile would count from the new time, and the timer would
// fire late by the move (the dispatcher slept past a retry's time, and a
// test that had moved the clock to it waited forever).
type deadlineTimer interface {
	ResetAt(when time.Time)
}

// resetAt makes t fire at when, by c's time.
func resetAt(t clock.Timer, when time.Time, c clock.Clock) {
	if dt, ok := t.(deadlineTimer); ok {
		dt.ResetAt(when)
		return
	}
	t.Reset(when.Sub(c.Now()))
}
