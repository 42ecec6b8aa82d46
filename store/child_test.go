package store

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestRunCancelCancelled(t *testing.T) {
	t.Parallel()
	p := RunCancelParams{ID: "r", Reason: "by hand"}
	want := Event{Type: EventRunCancelled, Reason: "by hand"}
	if got := p.Cancelled(); !reflect.DeepEqual(got, want) {
		t.Errorf("Cancelled() = %+v, want %+v", got, want)
	}
}

func TestParentEnded(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cancelled bool
		reason    string
	}{
		{false, "parent finished"},
		{true, "parent cancelled"},
	} {
		want := Event{Type: EventRunCancelled, Reason: tt.reason}
		if got := ParentEnded(tt.cancelled); !reflect.DeepEqual(got, want) {
			t.Errorf("ParentEnded(%v) = %+v, want %+v", tt.cancelled, got, want)
		}
	}
}

func TestParentWaits(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		status               RunStatus
		execution, startedIn int
		want                 bool
	}{
		{RunRunning, 1, 1, true},
		{RunPending, 2, 2, true},
		{RunRunning, 2, 1, false}, // continued as new since
		{RunCompleted, 1, 1, false},
		{RunFailed, 1, 1, false},
		{RunCancelled, 1, 1, false},
	} {
		if got := ParentWaits(tt.status, tt.execution, tt.startedIn); got != tt.want {
			t.Errorf("ParentWaits(%s, %d, %d) = %v, want %v", tt.status, tt.execution, tt.startedIn, got, tt.want)
		}
	}
}

func TestChildEnded(t *testing.T) {
	t.Parallel()
	boom := &ErrorInfo{Type: "E", Message: "boom"}
	out := json.RawMessage(`"ok"`)
	for _, tt := range []struct {
		status RunStatus
		output json.RawMessage
		err    *ErrorInfo
		want   Event
	}{
		{RunCompleted, out, nil, Event{Type: EventChildCompleted, Position: 3, Child: "c", Output: out}},
		{RunFailed, nil, boom, Event{Type: EventChildFailed, Position: 3, Child: "c", Error: boom, ChildStatus: "failed"}},
		{RunCancelled, nil, nil, Event{Type: EventChildFailed, Position: 3, Child: "c", ChildStatus: "cancelled"}},
	} {
		if got := ChildEnded("c", 3, tt.status, tt.output, tt.err); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ChildEnded(%s) = %+v, want %+v", tt.status, got, tt.want)
		}
	}
}

func TestSignalReceived(t *testing.T) {
	t.Parallel()
	p := SignalSendParams{RunID: "r", Name: "approve", Payload: json.RawMessage(`true`)}
	want := Event{Type: EventSignalReceived, Signal: "approve", Input: json.RawMessage(`true`)}
	if got := p.Received(); !reflect.DeepEqual(got, want) {
		t.Errorf("Received() = %+v, want %+v", got, want)
	}
}

func TestTimerFired(t *testing.T) {
	t.Parallel()
	want := Event{Type: EventTimerFired, Execution: 2, Position: 5}
	if got := TimerFired(2, 5); !reflect.DeepEqual(got, want) {
		t.Errorf("TimerFired(2, 5) = %+v, want %+v", got, want)
	}
}
