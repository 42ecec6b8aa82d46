package httpstep

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"reprise/retry"
)

// maxMessageBytes limits the message an endpoint reports with "success":
// false, so that one answer cannot bloat every attempt's history.
const maxMessageBytes = 4 << 10

// decodeOutput reads a 2xx body: the "output" field of an object with
// "success": true, an error for "success": false, or else the whole body.
// An empty body is JSON null.
func decodeOutput(body []byte) (json.RawMessage, error) {
	body = bytes.Trim(body, " \t\r\n")
	if len(body) == 0 {
		return json.RawMessage("null"), nil
	}
	if body[0] != '{' {
		if !json.Valid(body) {
			return nil, invalidResponse("body is not JSON", body)
		}
		return body, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, invalidResponse("body is not JSON", body)
	}
	success, ok := fields["success"]
	switch {
	case !ok:
		return body, nil
	case string(success) == "true":
		if out, ok := fields["output"]; ok {
			return out, nil
		}
		return json.RawMessage("null"), nil
	case string(success) == "false":
		return nil, reportedError(fields["error"])
	}
	return nil, invalidResponse(`"success" is neither true nor false`, success)
}

// reportedError turns the "error" of a body with "success": false into the
// attempt's error. A missing type is TypeStepFailed, a negative
// retry_after_ms is zero, and a bare string is the message.
func reportedError(raw json.RawMessage) error {
	var r Report
	switch {
	case len(raw) == 0 || string(raw) == "null":
	case raw[0] == '"':
		if err := json.Unmarshal(raw, &r.Message); err != nil {
			return invalidResponse(`"error" is not valid`, raw)
		}
	case raw[0] == '{':
		if err := json.Unmarshal(raw, &r); err != nil {
			return invalidResponse(`"error" is not {"type", "message", "retryable", "retry_after_ms"}`, raw)
		}
	default:
		return invalidResponse(`"error" is neither an object nor a string`, raw)
	}
	r.Type = cmp.Or(r.Type, TypeStepFailed)
	r.Message = clip(cmp.Or(r.Message, "the endpoint reported success: false"), maxMessageBytes)
	r.RetryAfterMS = max(r.RetryAfterMS, 0)
	return r.retryError()
}

func invalidResponse(what string, body []byte) error {
	return &retry.Error{Type: TypeInvalidResponse, Message: what + ": " + snippet(body)}
}

// parseRetryAfter reads a Retry-After header as delay-seconds or an HTTP
// date (RFC 9110 §10.2.3). A negative delay or a date in the past is zero, a
// delay over MaxRetryAfter is MaxRetryAfter, and anything unreadable is zero
// (no hint).
func parseRetryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if n, err := strconv.ParseInt(h, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		return clampRetryAfter(time.Duration(min(max(n, 0), int64(MaxRetryAfter/time.Second))) * time.Second)
	}
	if t, err := http.ParseTime(h); err == nil {
		return clampRetryAfter(t.Sub(now))
	}
	return 0
}

// clampRetryAfter bounds a retry-after hint to [0, MaxRetryAfter].
func clampRetryAfter(d time.Duration) time.Duration {
	return min(max(d, 0), MaxRetryAfter)
}

// snippet returns the start of a body for an error message: valid UTF-8,
// whitespace collapsed, at most snippetBytes long.
func snippet(body []byte) string {
	body = body[:min(len(body), 2*snippetBytes)]
	return clip(strings.Join(strings.Fields(strings.ToValidUTF8(string(body), "\uFFFD")), " "), snippetBytes)
}

// clip cuts s to at most n bytes at a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
