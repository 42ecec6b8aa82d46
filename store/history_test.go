package store

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestEventJSONRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	ev := Event{Seq: 4, Type: EventAttemptFailed, At: at, Position: 2, Step: "charge", Attempt: 1,
		Error: &ErrorInfo{Type: "HTTP5xx", Message: "503"}, Delay: 1500*time.Millisecond + 7, RetryAt: at.Add(1500 * time.Millisecond), Rule: "[retry: 3]"}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"delay_ms":1500.000007`) || strings.Contains(string(b), `"delay"`) {
		t.Errorf("encoding %s: want delay_ms in fractional milliseconds", b)
	}
	var back Event
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Delay != ev.Delay || !back.RetryAt.Equal(ev.RetryAt) || back.Error.Type != "HTTP5xx" || back.Rule != ev.Rule {
		t.Errorf("round trip: %+v, want %+v", back, ev)
	}
	// A retry without delay still says so.
	if b, err = json.Marshal(Event{Type: EventAttemptFailed, RetryAt: at}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"delay_ms":0`) {
		t.Errorf("zero-delay retry encodes as %s", b)
	}
}

// TestEventAppendJSON checks the hand-written encoder against encoding/json
// on the struct it replaces.
func TestEventAppendJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.FixedZone("X", 3600))
	odd := "quote\" back\\ ctl\x01\b\f\n\r\t <a&b> \u2028\u2029 bad\xff é 😀"
	events := []Event{
		{Seq: 1, Type: EventRunStarted, At: at, Execution: 1, Workflow: "order", Input: json.RawMessage(`{"id":7,"s":"x"}`)},
		{Seq: 2, Type: EventStepScheduled, At: at, Position: 3, Step: odd, Policy: "[retry: 3]\nexponential", IdempotencyKey: "r/3"},
		{Seq: 3, Type: EventAttemptStarted, At: at, Attempt: 2, Worker: "w", LeaseUntil: at.Add(time.Second)},
		{Seq: 4, Type: EventAttemptFailed, At: at, Error: &ErrorInfo{Type: "Panic", Message: odd, Stack: "goroutine 1"},
			Delay: 1500*time.Millisecond + 7, RetryAt: at.Add(time.Second), Rule: "HTTP5xx", Reason: "exhausted"},
		{Seq: 5, Type: EventAttemptFailed, At: at, Error: &ErrorInfo{Type: "X"}, RetryAt: at},
		{Seq: 6, Type: EventTimerScheduled, At: at, FireAt: at},
		{Seq: 7, Type: EventTimerScheduled, At: at, Delay: time.Nanosecond, FireAt: at},
		{Seq: 8, Type: EventStepCompleted, At: at, Output: json.RawMessage(`[1,2.5e10,null,true,"\u00e9"]`)},
		{Seq: 9, Type: EventVersionMarker, At: at, Version: -1, Child: "c1"},
		{Seq: 10, Type: EventAttemptFailed, At: at, Delay: 1<<63 - 1, RetryAt: at},
		{Seq: 11, Type: EventRunFailed, At: at, Error: &ErrorInfo{Type: "CardDeclined", Message: "no funds",
			Step: odd, Position: 2, Attempts: 3, Reason: "exhausted"}},
		{Seq: 12, Type: EventSignalReceived, At: at, Signal: odd, Input: json.RawMessage(`null`)},
		{Seq: 13, Type: EventVersionMarker, At: at, Position: 4, Change: odd, Version: 2},
		{Seq: 14, Type: EventRunRedriven, At: at, Position: 2, Step: "charge", By: odd},
		{Seq: 15, Type: EventChildFailed, At: at, Position: 5, Child: "r/5", ChildStatus: RunCancelled},
	}
	for _, e := range events {
		want, err := json.Marshal(struct {
			eventJSON
			DelayMS *float64 `json:"delay_ms,omitempty"`
		}{eventJSON(e), delayMS(e)})
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("event %d:\n got %s\nwant %s", e.Seq, got, want)
		}
	}

	// A document with spaces is compacted, one that is not JSON refused.
	got, err := Event{Type: EventRunStarted, Input: json.RawMessage("{ \"a\" : [1, 2] }")}.AppendJSON(nil)
	if err != nil || string(got) != `{"type":"RunStarted","input":{"a":[1,2]}}` {
		t.Errorf("spaced input: %s, %v", got, err)
	}
	if _, err := (Event{Type: EventRunStarted, Input: json.RawMessage("{ bad")}).AppendJSON(nil); err == nil {
		t.Error("invalid input encoded without an error")
	}
}

// delayMS is what the encoding/json version of MarshalJSON wrote as delay_ms.
func delayMS(e Event) *float64 {
	if e.Delay == 0 && e.RetryAt.IsZero() && e.Type != EventTimerScheduled {
		return nil
	}
	v := float64(e.Delay) / float64(time.Millisecond)
	return &v
}

func BenchmarkEventJSON(b *testing.B) {
	at := time.Now()
	e := Event{Seq: 4, Type: EventAttemptStarted, At: at, Position: 1, Step: "charge", Attempt: 1,
		Worker: "engine-1", LeaseUntil: at, IdempotencyKey: "0123456789abcdef/1"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.MarshalJSON(); err != nil {
			b.Fatal(err)
		}
	}
}

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestEventOlderForm decodes events of the older form, as stored histories
// hold them: a SignalReceived's name and a VersionMarker's change id in
// step, who redrove a run and a child's status in reason. Each decodes
// into the field of its own, and encodes as testdata/events_older_form.golden
// (go test -update rewrites it); the events that never shared a field are
// left as they were. The new form decodes as it is.
func TestEventOlderForm(t *testing.T) {
	t.Parallel()
	older, err := os.ReadFile("testdata/events_older_form.json")
	if err != nil {
		t.Fatal(err)
	}
	var events []Event
	var got bytes.Buffer
	for line := range bytes.Lines(older) {
		var e Event
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		events = append(events, e)
		b, err := e.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		got.Write(append(b, '\n'))
	}
	const golden = "testdata/events_older_form.golden"
	if *update {
		if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("older events encode as\n%s\nwant (%s)\n%s", got.Bytes(), golden, want)
	}

	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	stepErr := &ErrorInfo{Type: "CardDeclined", Message: "no funds", Step: "charge", Position: 1, Attempts: 3, Reason: "exhausted"}
	wantEvents := []Event{
		{Type: EventSignalReceived, Signal: "approve", Input: json.RawMessage(`{"by":"alice"}`)},
		{Type: EventSignalReceived, Signal: "nudge", Input: json.RawMessage(`null`)},
		{Seq: 9, Type: EventSignalReceived, At: at, Execution: 2, Signal: "approve", Input: json.RawMessage(`true`)},
		{Type: EventVersionMarker, Position: 2, Change: "new-tax", Version: 2},
		{Type: EventVersionMarker, Position: 3, Change: "skipped:notify", Version: 1},
		{Type: EventRunRedriven, Position: 1, Step: "charge", By: "alice"},
		{Type: EventChildFailed, Position: 3, Child: "order-1/3", Error: stepErr, ChildStatus: RunFailed},
		{Type: EventChildFailed, Position: 4, Child: "order-1/4", ChildStatus: RunCancelled},
		{Type: EventStepFailed, Position: 1, Step: "charge", Attempt: 3,
			Error: &ErrorInfo{Type: "CardDeclined", Message: "no funds"}, Reason: "exhausted"},
		{Type: EventRunCancelled, Reason: ReasonParentFinished},
	}
	if !reflect.DeepEqual(events, wantEvents) {
		t.Errorf("older events decode as\n%+v\nwant\n%+v", events, wantEvents)
	}

	// The new form reads back as it is.
	for line := range bytes.Lines(want) {
		var e Event
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		b, err := e.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != string(bytes.TrimSuffix(line, []byte("\n"))) {
			t.Errorf("new form %s reads back as %s", line, b)
		}
	}
}
