package httpstep

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"reprise/retry"
)

func TestErrorFromReport(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		json    string
		want    *retry.Error
		wantErr string
	}{
		{"permanent by default", `{"type": "CardDeclined", "message": "no funds"}`,
			&retry.Error{Type: "CardDeclined", Message: "no funds"}, ""},
		{"retryable", `{"type": "Busy", "retryable": true, "retry_after_ms": 250}`,
			&retry.Error{Type: "Busy", Retryable: true, RetryAfter: 250 * time.Millisecond}, ""},
		{"retryable false", `{"type": "Busy", "retryable": false}`, &retry.Error{Type: "Busy"}, ""},
		{"retry after capped", `{"type": "Busy", "retryable": true, "retry_after_ms": 9223372036854775807}`,
			&retry.Error{Type: "Busy", Retryable: true, RetryAfter: MaxRetryAfter}, ""},
		{"no type", `{"message": "x"}`, nil, "error report: type is empty"},
		{"negative retry after", `{"type": "A", "retry_after_ms": -1}`, nil, "retry_after_ms -1 is negative"},
		{"all problems at once", `{"retry_after_ms": -1}`, nil, "type is empty\nretry_after_ms -1 is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var r Report
			if err := json.Unmarshal([]byte(tt.json), &r); err != nil {
				t.Fatal(err)
			}
			got, err := ErrorFromReport(r)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *got != *tt.want {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
		})
	}
}

// TestReportJSON pins the wire shape a Report reads and writes.
func TestReportJSON(t *testing.T) {
	t.Parallel()
	yes := true
	for _, tt := range []struct {
		r    Report
		want string
	}{
		{Report{Type: "A"}, `{"type":"A"}`},
		{Report{Type: "A", Message: "m", Retryable: &yes, RetryAfterMS: 5},
			`{"type":"A","message":"m","retryable":true,"retry_after_ms":5}`},
	} {
		b, err := json.Marshal(tt.r)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tt.want {
			t.Errorf("%s, want %s", b, tt.want)
		}
	}
}
