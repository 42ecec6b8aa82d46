package httpapi

import (
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"reprise/internal/runfilter"
)

// FuzzDecodeBodies sends arbitrary bodies to every endpoint that takes one:
// the answer is never a 5xx, a 400 names the field at fault, and a body
// that is not valid UTF-8 or not JSON is never accepted.
func FuzzDecodeBodies(f *testing.F) {
	paths := []string{
		"/v1/runs", "/v1/steps", "/v1/tasks/claim", "/v1/runs/r1/cancel",
		"/v1/tasks/1/complete", "/v1/tasks/1/fail", "/v1/tasks/1/heartbeat",
		"/v1/runs/r1/2/cancel", "/v1/runs/r1%2F2/signals", // a child run's id, as it is and escaped
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
		`{"workflow":"echo","WORKFLOW":"echo"}`,
		`{"workflow":"echo","workflow":"echo"}`,
		`{"workflow":"echo","input":{"a":{"b":1,"b":2}}}`,
		`{"workflow":"echo","input":"\ud800"}`,
		`{"worker":"w","steps":["work"],"max":1.0}`,
		`{"token":1,"error":{"type":"X","retry_after_ms":5e0}}`,
		"{\"workflow\":\"echo\",\"input\":\"\xc3\"}",
		`{"workflow":"echo","input":{"\u0000":1}}`,
		`{"workflow":"echo","input":1e999999}`,
		`{"workflow":"echo"} x`,
		`{"name":"w","kind":"http","url":"http://u:hunter2@[::1"}`,
		`{"workflow":"echo","input":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
		`[`, `null`, `{"a":`, "\xff", " \n",
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
			if !utf8.ValidString(body) || !json.Valid([]byte(body)) {
				t.Fatalf("POST %s %q: %d accepted", path, body, status)
			}
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

// FuzzQuery sends arbitrary query strings to every endpoint: the answer is
// never a 5xx, a 400 names the field at fault, and a query the endpoint
// does not take is never accepted.
func FuzzQuery(f *testing.F) {
	endpoints := []struct {
		method, path string
		takes        []string
	}{
		{"GET", "/v1/runs", append(slices.Clone(runfilter.Params), "limit", "cursor")},
		{"GET", "/v1/runs/r1", []string{"wait", "after"}},
		{"GET", "/v1/runs/r1/history", []string{"wait", "after"}},
		{"GET", "/v1/steps", nil},
		{"GET", "/metrics", nil},
		{"GET", "/healthz", nil},
		{"POST", "/v1/runs/r1/cancel", nil},
	}
	for i, q := range []string{
		"status=failed", "stauts=failed", "status=failed&status=running", "workflow=%00", "workflow=%ff",
		"limit=%zz", "limit=1;cursor=x", "wait=1ms&after=0", "wait=1ms&wait=2ms", "x", "=1", "&&", "%",
		"limit=-1", "limit=0", "limit=99999999999999999999", "cursor=..", "cursor=a%2F1", "after=-1", "wait=1e400",
		"since=9999-12-31T00:00:00Z", "until=0001-01-01T00:00:00Z", "since=1h&until=2h", "since=2026-13-01T00:00:00Z",
	} {
		f.Add(uint8(i), q)
	}
	s := newTestServer(f, Options{MaxWait: 5 * time.Millisecond}, echo)
	f.Fuzz(func(t *testing.T, which uint8, query string) {
		ep := endpoints[int(which)%len(endpoints)]
		if strings.ContainsFunc(query, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '#' }) {
			return // not a query string a client can send
		}
		status, b := s.call(t, ep.method, ep.path+"?"+query, "")
		if status >= 500 {
			t.Fatalf("%s %s?%s: %d %s", ep.method, ep.path, query, status, b)
		}
		if status/100 == 2 {
			q, err := url.ParseQuery(query)
			if err != nil {
				t.Fatalf("%s %s?%q: %d for a malformed query", ep.method, ep.path, query, status)
			}
			for name, values := range q {
				if !slices.Contains(ep.takes, name) || len(values) != 1 || !utf8.ValidString(values[0]) {
					t.Fatalf("%s %s?%q: %d for parameter %q = %q", ep.method, ep.path, query, status, name, values)
				}
			}
			return
		}
		var p Problem
		if err := json.Unmarshal(b, &p); err != nil || p.Status != status {
			t.Fatalf("%s %s?%q: %d %s: not a problem", ep.method, ep.path, query, status, b)
		}
		if status == 400 && p.Field == "" {
			t.Fatalf("%s %s?%q: 400 names no field: %+v", ep.method, ep.path, query, p)
		}
	})
}
