package retry

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics, that its errors point inside
// the input, and that every policy it returns is valid and survives printing
// and reading back, in the text form and in JSON. The seed corpus is in
// testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Add("[retry: 3, backoff: 60] [timeout: 2m]")
	f.Add("[(ValueError, KeyError) -> retry: 3, backoff: 30s] [non_retryable: (A)]")
	f.Add("[retry: unlimited, backoff: 100ms, max_backoff: 30s, jitter: full] [timeout: 5s, deadline: 1h]")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Parse(s)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Parse(%q): %v is not a *SyntaxError", s, err)
			}
			if lines := strings.Count(s, "\n") + 1; se.Line < 1 || se.Line > lines || se.Column < 1 {
				t.Fatalf("Parse(%q): error at %d:%d, outside the input's %d lines", s, se.Line, se.Column, lines)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("Parse(%q) returned an invalid policy: %v", s, err)
		}
		text := p.String()
		q, err := Parse(text)
		if err != nil {
			t.Fatalf("Parse(%q) printed %q, which does not parse: %v", s, text, err)
		}
		if !reflect.DeepEqual(p, q) {
			t.Fatalf("Parse(%q) = %#v\nprinted %q, read back as %#v", s, p, text, q)
		}
		if again := q.String(); again != text {
			t.Fatalf("printing is not stable: %q then %q", text, again)
		}
		data, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("MarshalJSON(%q): %v", text, err)
		}
		var r Policy
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatalf("UnmarshalJSON(%s): %v", data, err)
		}
		if !reflect.DeepEqual(p, r) {
			t.Fatalf("JSON %s read back as %#v, want %#v", data, r, p)
		}
	})
}
