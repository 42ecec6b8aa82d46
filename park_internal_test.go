package reprise

import (
	"testing"
	"time"

	"reprise/store"
)

// TestRetrySoon: a run whose last planned retry is due before soon is
// about to hear of its step, and is not evicted.
func TestRetrySoon(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	soon := now.Add(evictMinWait)
	failed := func(retryAt time.Time) Event {
		return Event{Type: store.EventAttemptFailed, RetryAt: retryAt}
	}
	for _, tc := range []struct {
		name   string
		events []Event
		want   bool
	}{
		{"nothing heard", nil, false},
		{"a retry in a second", []Event{failed(now.Add(time.Second))}, true},
		{"a retry in an hour", []Event{failed(now.Add(time.Hour))}, false},
		{"the last retry counts", []Event{failed(now.Add(time.Second)), {Type: store.EventAttemptStarted}, failed(now.Add(time.Hour))}, false},
		{"a failure that stops the step", []Event{failed(time.Time{})}, false},
	} {
		if got := retrySoon(tc.events, soon); got != tc.want {
			t.Errorf("%s: retrySoon %v, want %v", tc.name, got, tc.want)
		}
	}
}
