package cli

import (
	"encoding/json"
	"testing"
	"time"

	"reprise/store"
)

// TestDescribeWorkflowEvents: reprise history says what a signal, a
// version marker, a redrive and a child's end hold, each from its own
// field.
func TestDescribeWorkflowEvents(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	steps := map[int]string{2: "charge"}
	for _, tt := range []struct {
		ev   store.Event
		want string
	}{
		{store.Event{Type: store.EventSignalReceived, Signal: "approve", Input: json.RawMessage(`true`)},
			"signal approve received  payload true"},
		{store.Event{Type: store.EventVersionMarker, Position: 1, Change: "new-tax", Version: 2},
			"change new-tax at version 2"},
		{store.Event{Type: store.EventRunRedriven, Position: 2, Step: "charge", By: "alice"},
			"run redriven by alice: step #2 charge gets new attempts"},
		{store.Event{Type: store.EventChildStarted, Position: 3, Child: "r/3", Workflow: "ship"},
			"child #3 r/3 started  workflow ship"},
		{store.Event{Type: store.EventChildCompleted, Position: 3, Child: "r/3", Output: json.RawMessage(`1`)},
			"child #3 r/3 completed  result 1"},
		{store.Event{Type: store.EventChildFailed, Position: 3, Child: "r/3", ChildStatus: store.RunCancelled},
			"child #3 r/3 CANCELLED  "},
		{store.Event{Type: store.EventChildFailed, Position: 3, Child: "r/3", ChildStatus: store.RunFailed,
			Error: &store.ErrorInfo{Type: "CardDeclined", Message: "no funds"}},
			"child #3 r/3 FAILED  CardDeclined: no funds"},
	} {
		if got := describe(tt.ev, start, steps); got != tt.want {
			t.Errorf("%s:\n got %q\nwant %q", tt.ev.Type, got, tt.want)
		}
	}
}
