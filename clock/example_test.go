package clock_test

import (
	"fmt"
	"time"

	"reprise/clock"
)

// A Fake clock moves only when told to, and fires the timers it passes.
func ExampleFake() {
	c := clock.NewFake(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC))
	t := c.NewTimer(time.Hour)

	c.Advance(20 * time.Minute)
	next, _ := c.Next()
	fmt.Println("now", c.Now().Format(time.Kitchen), "next timer", next.Format(time.Kitchen))

	c.Set(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	fmt.Println("fired, not yet taken:", c.Pending())
	fmt.Println("fired at", (<-t.C()).Format(time.Kitchen))
	// Output:
	// now 9:20AM next timer 10:00AM
	// fired, not yet taken: 1
	// fired at 10:00AM
}
