package reprise

import (
	"testing"
	"time"

	"reprise/clock"
)

// TestResetAtIgnoresAMoveOfTheClock: the dispatcher sets its timer for the
// next due time. Set as a duration read off the clock before a test moved
// it, the timer counted from the new time and fired late by the move, and
// a test that had moved the clock exactly to the due time waited forever
// (TestHandedResultRefusedReplays, now and then under load). Set for the
// time itself, it fires when the clock reaches it.
func TestResetAtIgnoresAMoveOfTheClock(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	fired := func(tm clock.Timer) bool {
		select {
		case <-tm.C():
			return true
		default:
			return false
		}
	}

	due := c.Now().Add(time.Second)
	late, exact := c.NewTimer(time.Hour), c.NewTimer(time.Hour)
	late.Stop()
	exact.Stop()
	d := due.Sub(c.Now())
	c.Advance(300 * time.Millisecond) // between reading the clock and setting the timers
	late.Reset(d)
	resetAt(exact, due, c)
	c.Advance(700 * time.Millisecond) // to the due time
	if fired(late) {
		t.Fatal("a timer reset by a duration read before the move fired on time: the test shows nothing")
	}
	if !fired(exact) {
		t.Error("a timer reset for the due time did not fire when the clock reached it")
	}

	// Set for a time the clock has passed, it fires at once.
	resetAt(exact, c.Now().Add(-time.Second), c)
	if !fired(exact) {
		t.Error("a timer reset for a past time did not fire at once")
	}

	// The system clock's timers take the same call.
	sys := clock.System.NewTimer(time.Hour)
	sys.Stop()
	resetAt(sys, time.Now().Add(time.Millisecond), clock.System)
	select {
	case <-sys.C():
	case <-time.After(5 * time.Second):
		t.Error("a system timer reset for a time 1 ms away did not fire within 5 s")
	}
}
