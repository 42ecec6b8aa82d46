package httpstep

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"reprise/retry"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		header string
		want   time.Duration
	}{
		{"0", 0},
		{"1", time.Second},
		{" 120 ", 2 * time.Minute},
		{"+5", 5 * time.Second},
		{"86400", MaxRetryAfter},
		{"86401", MaxRetryAfter},
		{"9223372036854775807", MaxRetryAfter},
		{"99999999999999999999999", MaxRetryAfter},
		{"-1", 0},
		{"-99999999999999999999999", 0},
		{"1.5", 0},
		{"1s", 0},
		{"", 0},
		{"soon", 0},
		{now.Add(42 * time.Second).Format(http.TimeFormat), 42 * time.Second},
		{now.Add(42 * time.Second).Format(time.RFC850), 42 * time.Second},
		{now.Add(42 * time.Second).Format(time.ANSIC), 42 * time.Second},
		{now.Format(http.TimeFormat), 0},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{now.Add(25 * time.Hour).Format(http.TimeFormat), MaxRetryAfter},
		{"Sun, 99 Foo 2026 00:00:00 GMT", 0},
	}
	for _, tt := range tests {
		if got := parseRetryAfter(tt.header, now); got != tt.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tt.header, got, tt.want)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "120", "-1", "99999999999999999999", "soon", now.Format(http.TimeFormat)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		if d := parseRetryAfter(h, now); d < 0 || d > MaxRetryAfter {
			t.Fatalf("parseRetryAfter(%q) = %v, out of [0, %v]", h, d, MaxRetryAfter)
		}
	})
}

// FuzzDecodeOutput: any 2xx body gives valid JSON output or a *retry.Error.
func FuzzDecodeOutput(f *testing.F) {
	for _, s := range []string{
		``, `null`, `[1]`, `{"a": 1}`, `{"success": true, "output": {"b": 2}}`,
		`{"success": false, "error": {"type": "A", "retryable": true, "retry_after_ms": 5}}`,
		`{"success": false, "error": "x"}`, `{"success": 1}`, `<html>`, "{\"a\":\xff}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		out, err := decodeOutput(body)
		if err != nil {
			var re *retry.Error
			if !errors.As(err, &re) || re.Type == "" || re.RetryAfter < 0 || re.RetryAfter > MaxRetryAfter {
				t.Fatalf("decodeOutput(%q): error %#v", body, err)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("decodeOutput(%q) = %q, not JSON", body, out)
		}
	})
}

func TestClip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 3, "abc"},
		{"abcd", 3, "abc…"},
		{"aé", 2, "a…"},
		{"aé", 3, "aé"},
		{"日本", 4, "日…"},
	}
	for _, tt := range tests {
		if got := clip(tt.s, tt.n); got != tt.want {
			t.Errorf("clip(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
	}
}
