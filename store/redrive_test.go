package store

import (
	"errors"
	"reflect"
	"testing"
)

func TestLastStepEnd(t *testing.T) {
	t.Parallel()
	history := []Event{
		{Seq: 1, Type: EventRunStarted, Execution: 1},
		{Seq: 2, Type: EventStepFailed, Execution: 1, Position: 1},
		{Seq: 3, Type: EventRunContinuedAsNew, Execution: 1},
		{Seq: 4, Type: EventRunStarted, Execution: 2},
		{Seq: 5, Type: EventStepCompleted, Execution: 2, Position: 1},
		{Seq: 6, Type: EventStepFailed, Execution: 2, Position: 2},
		{Seq: 7, Type: EventRunFailed, Execution: 2},
	}
	for _, tt := range []struct {
		name      string
		events    []Event
		execution int
		seq       int64 // 0: none
	}{
		{"Last", history, 2, 6},
		{"EarlierExecution", history, 1, 2},
		{"OnlyCompleted", history[:5], 2, 5},
		{"NoneInExecution", history[:4], 2, 0},
		{"Empty", nil, 1, 0},
	} {
		got, ok := LastStepEnd(tt.events, tt.execution)
		if ok != (tt.seq != 0) || got.Seq != tt.seq {
			t.Errorf("%s: LastStepEnd = %+v, %v; want seq %d", tt.name, got, ok, tt.seq)
		}
	}
}

func TestRunRedrive(t *testing.T) {
	t.Parallel()
	failed := Event{Seq: 6, Type: EventStepFailed, Execution: 2, Position: 2, Step: "charge", Attempt: 3}
	readErr := errors.New("read")
	for _, tt := range []struct {
		name   string
		status RunStatus
		last   Event
		err    error
		want   Event
		wantE  error
		reads  bool
	}{
		{"Failed", RunFailed, failed, nil,
			Event{Type: EventRunRedriven, Position: 2, Step: "charge", By: "ops"}, nil, true},
		{"LastCompleted", RunFailed, Event{Type: EventStepCompleted, Position: 2}, nil, Event{}, ErrNotRedrivable, true},
		{"NoStep", RunFailed, Event{}, nil, Event{}, ErrNotRedrivable, true},
		{"ReadFails", RunFailed, Event{}, readErr, Event{}, readErr, true},
		{"Running", RunRunning, failed, nil, Event{}, ErrNotRedrivable, false},
		{"Completed", RunCompleted, failed, nil, Event{}, ErrNotRedrivable, false},
		{"Cancelled", RunCancelled, failed, nil, Event{}, ErrNotRedrivable, false},
	} {
		p := RunRedriveParams{ID: "r", By: "ops"}
		read := false
		got, err := p.Redrive(tt.status, func() (Event, error) {
			read = true
			return tt.last, tt.err
		})
		if !errors.Is(err, tt.wantE) || (tt.wantE == nil) != (err == nil) || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Redrive = %+v, %v; want %+v, %v", tt.name, got, err, tt.want, tt.wantE)
		}
		if read != tt.reads {
			t.Errorf("%s: history read = %v, want %v", tt.name, read, tt.reads)
		}
	}
}
