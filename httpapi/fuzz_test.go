package httpapi

import (
	"encoding/json"
	"testing"
	"time"
)

// FuzzDecodeBodies sends arbitrary bodies to every endpoint that takes one:
// the answer is never a 5xx, and a 400 names the field at fault.
func FuzzDecodeBodies(f *testing.F) {
	paths := []string{
		"/v1/runs", "/v1/steps", "/v1/tasks/claim", "/v1/runs/r1/cancel",
		"/v1/tasks/1/complete", "/v1/tasks/1/fail", "/v1/tasks/1/heartbeat",
	}
	for i, body := range []string{
		`{"workflow":"echo","input":{"a":[1,2]},"id":"r1"}`,
		`{"step":"work","input":null}`,
		`{"name":"work","kind":"pull","policy":"[retry: 3, backoff: 1s] [timeout: 5s]"}`,
		`{"name":"web","kind":"http","url":"http://127.0.0.1:1/x","policy":{"max_retries":2}}`,
		`{"worker":"w","steps":["work"],"max":2,"wait":"1ms"}`,
		`{"reason":"why"}`,
		`{"token":1,"output":{"x":1}}`,
		`{"token":1,"error":{"type":"X","message":"m","retryable":true,"retry_after_ms":5}}`,
		`{"token":1}`,
		`{"token":1e400}`,
		`{"id":"\u0000"}`,
		`[`, `null`, `{"a":`, "\xff",
	} {
		f.Add(uint8(i), body)
	}
	s := newTestServer(f, Options{MaxBodyBytes: 4096, MaxWait: 5 * time.Millisecond}, echo)
	f.Fuzz(func(t *testing.T, which uint8, body string) {
		path := paths[int(which)%len(paths)]
		status, b := s.call(t, "POST", path, body)
		if status >= 500 {
			t.Fatalf("POST %s %q: %d %s", path, body, status, b)
		}
		if status/100 == 2 {
			return
		}
		var p Problem
		if err := json.Unmarshal(b, &p); err != nil || p.Status != status {
			t.Fatalf("POST %s %q: %d %s: not a problem", path, body, status, b)
		}
		if status == 400 && p.Field == "" {
			t.Fatalf("POST %s %q: 400 names no field: %+v", path, body, p)
		}
	})
}
