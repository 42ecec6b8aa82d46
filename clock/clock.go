// Package clock is the time a reprise engine runs on: the system's, or a
// fake one that a test moves.
package clock

import (
	"sort"
	"sync"
	"time"
)

// A Clock tells the time and wakes its callers later. A reprise engine
// takes one (Config.Clock) so that tests can move time instead of
// sleeping; give the engine's store the same clock's Now.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that sends on C() once d has passed.
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
}

// A Timer is a Clock's pending wake-up.
type Timer interface {
	C() <-chan time.Time
	// Reset makes the timer fire d from now; the timer must be stopped or
	// have fired and been drained.
	Reset(d time.Duration)
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
}

// System is the real clock.
var System Clock = systemClock{}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer {
	return sysTimer{time.AfterFunc(d, f)}
}

type sysTimer struct{ t *time.Timer }

func (t sysTimer) C() <-chan time.Time   { return t.t.C }
func (t sysTimer) Reset(d time.Duration) { t.t.Reset(d) }
func (t sysTimer) Stop() bool            { return t.t.Stop() }

// A Fake is a clock that moves only when told to. Timers fire, in order of
// their times, when Advance or Set passes them. Its timers can also be set
// to fire at a time (ResetAt), which the engine prefers: a duration read
// off a clock that a test moves meanwhile would count from the new time.
// It is safe for concurrent use.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	// fired holds channel timers that fired; running counts AfterFunc
	// calls not yet returned. Pending reads both.
	fired   []*fakeTimer
	running int
}

// NewFake returns a clock standing at start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// Now returns the clock's time.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer implements Clock.
func (c *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// AfterFunc implements Clock.
func (c *Fake) AfterFunc(d time.Duration, f func()) Timer {
	t := &fakeTimer{c: c, f: f}
	t.Reset(d)
	return t
}

// Advance moves the clock forward by d, firing the timers it passes.
func (c *Fake) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// Set moves the clock to t (never backwards), firing the timers it passes.
func (c *Fake) Set(t time.Time) {
	for {
		c.mu.Lock()
		if len(c.timers) == 0 || c.timers[0].when.After(t) {
			if t.After(c.now) {
				c.now = t
			}
			c.mu.Unlock()
			return
		}
		ft := c.timers[0]
		c.timers = c.timers[1:]
		ft.active = false
		if ft.when.After(c.now) {
			c.now = ft.when
		}
		now := c.now
		c.mu.Unlock()
		ft.fire(now)
	}
}

// Pending counts the timers that fired but whose receivers have not yet
// taken the time from the channel, or whose functions are still running: a
// test that moves the clock waits for these before moving it again.
func (c *Fake) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := c.fired[:0]
	for _, t := range c.fired {
		if len(t.ch) > 0 {
			kept = append(kept, t)
		}
	}
	clear(c.fired[len(kept):])
	c.fired = kept
	return len(kept) + c.running
}

// Next returns the time of the earliest pending timer.
func (c *Fake) Next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.timers) == 0 {
		return time.Time{}, false
	}
	return c.timers[0].when, true
}

type fakeTimer struct {
	c      *Fake
	ch     chan time.Time
	f      func()
	when   time.Time
	active bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) fire(now time.Time) {
	c := t.c
	if t.f != nil {
		c.mu.Lock()
		c.running++
		c.mu.Unlock()
		go func() {
			defer func() {
				c.mu.Lock()
				c.running--
				c.mu.Unlock()
			}()
			t.f()
		}()
		return
	}
	select {
	case t.ch <- now:
		c.mu.Lock()
		c.fired = append(c.fired, t)
		c.mu.Unlock()
	default:
	}
}

func (t *fakeTimer) Reset(d time.Duration) {
	t.c.mu.Lock()
	t.resetLocked(t.c.now.Add(d))
}

// ResetAt makes the timer fire when the clock reaches when: at once if it
// has.
func (t *fakeTimer) ResetAt(when time.Time) {
	t.c.mu.Lock()
	t.resetLocked(when)
}

// resetLocked sets the timer to when; c.mu must be held, and is released.
func (t *fakeTimer) resetLocked(when time.Time) {
	c := t.c
	t.remove()
	t.drain()
	t.when = when
	if !when.After(c.now) {
		now := c.now
		c.mu.Unlock()
		t.fire(now)
		return
	}
	t.active = true
	i := sort.Search(len(c.timers), func(i int) bool { return c.timers[i].when.After(t.when) })
	c.timers = append(c.timers, nil)
	copy(c.timers[i+1:], c.timers[i:])
	c.timers[i] = t
	c.mu.Unlock()
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.drain()
	return t.remove()
}

// drain drops a time fired and not received, as Stop and Reset do for a
// time.Timer since Go 1.23: a timer stopped by a goroutine that then exits
// would otherwise count as pending forever.
func (t *fakeTimer) drain() {
	if t.ch != nil {
		select {
		case <-t.ch:
		default:
		}
	}
}

// remove takes t off the clock's list; the clock's lock must be held.
func (t *fakeTimer) remove() bool {
	if !t.active {
		return false
	}
	t.active = false
	for i, x := range t.c.timers {
		if x == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			break
		}
	}
	return true
}
