package reprise

import (
	"testing"

	"reprise/store"
)

// TestPushWakesForWhatSettles checks that a runner is woken by events it
// may have to act on, and by a push without events, but not by attempts
// started and failed alone, which wait in its inbox.
func TestPushWakesForWhatSettles(t *testing.T) {
	t.Parallel()
	r := &replayer{e: &Engine{act: newActivity(NopObserver{})}, wake: make(chan struct{}, 1), seen: 1} // RunStarted
	woken := func() bool {
		select {
		case <-r.wake:
			return true
		default:
			return false
		}
	}
	r.push([]Event{{Seq: 2, Type: store.EventAttemptFailed}, {Seq: 3, Type: store.EventAttemptStarted}})
	if woken() {
		t.Error("woken by an attempt's failure and the next one's start")
	}
	if len(r.inbox) != 2 || r.seen != 3 {
		t.Errorf("inbox %d events, seen %d; want 2 and 3", len(r.inbox), r.seen)
	}
	r.push([]Event{{Seq: 4, Type: store.EventAttemptFailed}, {Seq: 5, Type: store.EventStepFailed}})
	if !woken() {
		t.Error("not woken by a step's failure")
	}
	r.push([]Event{{Seq: 6, Type: store.EventStepCompleted}})
	if !woken() {
		t.Error("not woken by a step's completion")
	}
	r.push(nil)
	if !woken() {
		t.Error("not woken by a push without events")
	}
	if len(r.inbox) != 5 {
		t.Errorf("inbox holds %d events, want all 5", len(r.inbox))
	}
	if busy := r.e.act.n.Load(); busy != 3 {
		t.Errorf("busy %d, want 3: one per wake-up not yet taken", busy)
	}
}
