package reprise

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
