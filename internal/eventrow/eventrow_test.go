package eventrow_test

import (
	"reflect"
	"testing"
	"time"

	"reprise/internal/eventrow"
	"reprise/store"
)

var at = time.Date(2026, 11, 22, 8, 0, 0, 123000, time.UTC)

// row encodes events as one row and returns its columns.
func row(t *testing.T, events []store.Event) (seq int64, execution int, body []byte) {
	t.Helper()
	bodies := make([][]byte, len(events))
	for i, e := range events {
		var err error
		if bodies[i], err = eventrow.Body(e); err != nil {
			t.Fatal(err)
		}
	}
	last := events[len(events)-1]
	return last.Seq, last.Execution, eventrow.Join(events, bodies)
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	events := []store.Event{
		{Seq: 4, Type: store.EventAttemptFailed, At: at, Execution: 1, Position: 1, Step: "charge", Attempt: 1,
			Error: &store.ErrorInfo{Type: "timeout", Message: "slow"}, Delay: time.Second, RetryAt: at.Add(time.Second)},
		{Seq: 5, Type: store.EventAttemptStarted, At: at, Execution: 1, Position: 1, Step: "charge", Attempt: 2,
			Worker: "w", LeaseUntil: at.Add(time.Minute)},
		// A run continued as new: the row's last event is of another execution.
		{Seq: 6, Type: store.EventRunContinuedAsNew, At: at, Execution: 1},
		{Seq: 7, Type: store.EventRunStarted, At: at, Execution: 2, Workflow: "wf", Input: []byte(`{"n":1}`)},
	}
	for n := 1; n <= len(events); n++ {
		seq, execution, body := row(t, events[:n])
		for after := int64(0); after <= seq; after++ {
			got, err := eventrow.Decode(nil, seq, execution, at, body, after)
			if err != nil {
				t.Fatalf("%d events, after %d: %v", n, after, err)
			}
			var want []store.Event
			for _, e := range events[:n] {
				if e.Seq > after {
					want = append(want, e)
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%d events in %s, after %d:\n got %+v\nwant %+v", n, body, after, got, want)
			}
		}
	}
}

// TestBodyOmitsColumns checks that a body leaves out what the row's
// columns hold.
func TestBodyOmitsColumns(t *testing.T) {
	t.Parallel()
	body, err := eventrow.Body(store.Event{Seq: 3, Type: store.EventRunCompleted, At: at, Execution: 2})
	if err != nil {
		t.Fatal(err)
	}
	if string(body) != `{"type":"RunCompleted"}` {
		t.Errorf("body = %s", body)
	}
}

// TestDecodeOlderRow reads a row of the older layout: one event whose JSON
// holds seq, at and execution too. The columns win.
func TestDecodeOlderRow(t *testing.T) {
	t.Parallel()
	body := []byte(`{"seq":1,"type":"RunStarted","at":"2026-11-22T08:00:00.000123Z","execution":1,"workflow":"wf"}`)
	got, err := eventrow.Decode(nil, 1, 1, at, body, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Event{{Seq: 1, Type: store.EventRunStarted, At: at, Execution: 1, Workflow: "wf"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestDecodeBadBody(t *testing.T) {
	t.Parallel()
	for _, body := range []string{`[{"type":`, `{"type":1}`, ``} {
		if _, err := eventrow.Decode(nil, 2, 1, at, []byte(body), 0); err == nil {
			t.Errorf("Decode(%q) succeeded", body)
		}
	}
}

// TestDecodeOlderForm reads rows written before the events' shared fields
// were split: a row of one event and a row of several, as both stores keep
// them. The names, who and status come out in the fields of their own.
func TestDecodeOlderForm(t *testing.T) {
	t.Parallel()
	one := []byte(`{"type":"SignalReceived","step":"approve","input":true}`)
	several := []byte(`[{"type":"VersionMarker","position":2,"step":"new-tax","version":2},` +
		`{"type":"RunRedriven","position":1,"step":"charge","reason":"alice"},` +
		`{"type":"ChildFailed","position":3,"reason":"cancelled","child":"r/3"}]`)
	got, err := eventrow.Decode(nil, 1, 1, at, one, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, err = eventrow.Decode(got, 4, 1, at, several, 1); err != nil {
		t.Fatal(err)
	}
	want := []store.Event{
		{Seq: 1, Type: store.EventSignalReceived, At: at, Execution: 1, Signal: "approve", Input: []byte(`true`)},
		{Seq: 2, Type: store.EventVersionMarker, At: at, Execution: 1, Position: 2, Change: "new-tax", Version: 2},
		{Seq: 3, Type: store.EventRunRedriven, At: at, Execution: 1, Position: 1, Step: "charge", By: "alice"},
		{Seq: 4, Type: store.EventChildFailed, At: at, Execution: 1, Position: 3, Child: "r/3", ChildStatus: store.RunCancelled},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}
