package store

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestEventJSONRoundTrip(t *testing.T) {
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
	b, _ = json.Marshal(Event{Type: EventAttemptFailed, RetryAt: at})
	if !strings.Contains(string(b), `"delay_ms":0`) {
		t.Errorf("zero-delay retry encodes as %s", b)
	}
}

// TestEventAppendJSON checks the hand-written encoder against encoding/json
// on the struct it replaces.
func TestEventAppendJSON(t *testing.T) {
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
