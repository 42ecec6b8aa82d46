package retry

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with the file testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\n got %s\nwant %s", path, got, want)
	}
}

// A shapeCase is an input and the policy it reads as, in the text form, or a
// part of the error it gives.
type shapeCase struct{ in, want string }

func parseWorkConfig(s string) (Policy, error) { return ParseWorkConfig([]byte(s)) }
func parseTemporal(s string) (Policy, error)   { return ParseTemporal([]byte(s)) }

// checkErrors checks that parse fails on each input with the error wanted.
func checkErrors(t *testing.T, parse func(string) (Policy, error), tests []shapeCase) {
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			if p, err := parse(tt.in); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("parse(%s) = %v, %v; want an error containing %q", tt.in, p, err, tt.want)
			}
		})
	}
}

// checkShapes checks that parse reads each input as the policy wanted, and
// that ParseAny agrees.
func checkShapes(t *testing.T, parse func(string) (Policy, error), tests []shapeCase) {
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			p, err := parse(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if p.String() != tt.want {
				t.Errorf("read %s, want %s", p, tt.want)
			}
			if tt.in == "{}" {
				return // ParseAny wants a policy that says something
			}
			if any, err := ParseAny(tt.in); err != nil || !reflect.DeepEqual(any, p) {
				t.Errorf("ParseAny = %v, %v; want %v", any, err, p)
			}
		})
	}
}

// The JSON shape is a wire format: pinned by golden files.
func TestMarshalJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		p    Policy
	}{
		{"default", Default},
		{"never", Never},
		{"zero", Policy{}},
		{"every_field", mustParse(t, "[retry: unlimited, backoff: 100ms, max_backoff: 30s, jitter: full] "+
			"[(NetworkError, Timeout) -> retry: 5, backoff: 1s, backoff_kind: linear] "+
			"[RateLimitError -> retry: 10, backoff: 2s, backoff_kind: fixed, jitter: equal] "+
			"[Fatal -> retry: 3, backoff_kind: none] "+
			"[timeout: 5s, deadline: 1h, non_retryable: (ValidationError, AuthError)]")},
		{"multiplier", Attempts(4, Exponential(1500*time.Millisecond, 1.5, 90*time.Second))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			data, err := json.MarshalIndent(tt.p, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "json/"+tt.name+".json", append(data, '\n'))
			var back Policy
			if err := json.Unmarshal(data, &back); err != nil {
				t.Fatalf("Unmarshal(%s): %v", data, err)
			}
			if want := tt.p.Normalize(); !reflect.DeepEqual(back, want) {
				t.Errorf("read back as %#v, want %#v", back, want)
			}
		})
	}
}

func TestUnmarshalJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		json string
		want string // the policy in the text form, or "" for the zero Policy
	}{
		{`{}`, ""},
		{`{"rules": [{"max_attempts": 3}]}`, "[retry: 2]"},
		{`{"rules": [{"on": ["A"], "max_attempts": -1, "backoff": {"base": "2s"}}]}`, "[A -> retry: unlimited, backoff: 2s]"},
		{`{"rules": [{"max_attempts": 3, "backoff": {"kind": "none"}}]}`, "[retry: 2, backoff_kind: none]"},
		{`{"rules": [{"max_attempts": 3, "backoff": {"kind": "linear", "base": "60", "max": "5m", "jitter": "full"}}]}`,
			"[retry: 2, backoff: 1m, backoff_kind: linear, max_backoff: 5m, jitter: full]"},
		{`{"rules": [{"max_attempts": 1, "backoff": {"kind": "fixed", "base": "1s"}}]}`, "[retry: 0]"},
		{`{"rules": [{"max_attempts": 2, "backoff": null}], "timeout": null}`, "[retry: 1]"},
		{`{"rules": [], "timeout": "1m30s", "deadline": "1d", "non_retryable": ["X", "X"]}`, "[timeout: 90s, deadline: 1d, non_retryable: (X)]"},
	}
	for _, tt := range tests {
		t.Run(tt.json, func(t *testing.T) {
			t.Parallel()
			var p Policy
			if err := json.Unmarshal([]byte(tt.json), &p); err != nil {
				t.Fatal(err)
			}
			if p.String() != tt.want {
				t.Errorf("read %s, want %s", p, tt.want)
			}
		})
	}
}

func TestUnmarshalJSONErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		json string
		want string
	}{
		{`[]`, "policy: found array, want an object"},
		{`null`, "policy: found null, want an object"},
		{`{"rules": 3}`, "policy.rules: found number, want a list"},
		{`{"rule": []}`, `policy: unknown field "rule" (want deadline, non_retryable, rules, timeout)`},
		{`{"on": ["A"]}`, `policy: unknown field "on"`},
		{`{"rules": [{"max_attempts": 3, "retries": 2}]}`, `rules[0]: unknown field "retries" (want backoff, max_attempts, on)`},
		{`{"rules": [{"max_attempts": 3}, {"max_attempts": 3, "backoff": {"base": "1s", "cap": "1m"}}]}`,
			`rules[1].backoff: unknown field "cap" (want base, jitter, kind, max, multiplier)`},
		{`{"rules": [{}]}`, "rules[0]: max_attempts is missing"},
		{`{"rules": [{"max_attempts": 0}]}`, "rules[0].max_attempts: 0 is out of range"},
		{`{"rules": [{"max_attempts": -2}]}`, "rules[0].max_attempts: -2 is out of range"},
		{`{"rules": [{"max_attempts": 2.5}]}`, "rules[0].max_attempts: found number 2.5, want a whole number"},
		{`{"rules": [{"max_attempts": "3"}]}`, "rules[0].max_attempts: found string, want a whole number"},
		{`{"rules": [{"max_attempts": 3, "on": "A"}]}`, "rules[0].on: found string, want a list of strings"},
		{`{"rules": [{"max_attempts": 3, "on": ["no spaces"]}]}`, `rule 1: on[0]: "no spaces" is not an error type name`},
		{`{"rules": [{"max_attempts": 3, "backoff": {}}]}`, "rules[0].backoff: base is missing"},
		{`{"rules": [{"max_attempts": 3, "backoff": {"kind": "cubic", "base": "1s"}}]}`, `rules[0].backoff.kind: unknown backoff kind "cubic"`},
		{`{"rules": [{"max_attempts": 3, "backoff": {"kind": "none", "base": "1s"}}]}`, "rules[0].backoff.base: does not apply to kind none"},
		{`{"rules": [{"max_attempts": 3, "backoff": {"kind": "fixed", "base": "1s", "max": "1m"}}]}`, "rules[0].backoff.max: does not apply to kind fixed"},
		{`{"rules": [{"max_attempts": 3, "backoff": {"kind": "linear", "base": "1s", "multiplier": 2}}]}`, "rules[0].backoff.multiplier: does not apply to kind linear"},
		{`{"rules": [{"max_attempts": 3, "backoff": {"base": "1s", "multiplier": 0.5}}]}`, "rules[0].backoff.multiplier: 0.5 is out of range"},
		{`{"rules": [{"max_attempts": 3, "backoff": {"base": 1000}}]}`, "rules[0].backoff.base: found number, want a string"},
		{`{"rules": [{"max_attempts": 3, "backoff": {"base": "-1s"}}]}`, "rules[0].backoff.base: negative duration -1s"},
		{`{"rules": [{"max_attempts": 3, "backoff": {"base": "1s", "jitter": "lots"}}]}`, `rules[0].backoff.jitter: unknown jitter "lots"`},
		{`{"timeout": "soon"}`, `timeout: found "soon", want a duration`},
		{`{"deadline": "-1h"}`, "deadline: negative duration"},
	}
	for _, tt := range tests {
		t.Run(tt.json, func(t *testing.T) {
			t.Parallel()
			p := Default
			err := json.Unmarshal([]byte(tt.json), &p)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Unmarshal(%s) = %v, want an error containing %q", tt.json, err, tt.want)
			}
			if !reflect.DeepEqual(p, Default) {
				t.Errorf("a failed Unmarshal changed the policy to %v", p)
			}
		})
	}
}

func TestParseWorkConfig(t *testing.T) {
	t.Parallel()
	tests := []shapeCase{
		{`{"max_retries": 0}`, "[retry: 0]"},
		{`{"max_retries": 3}`, "[retry: 3]"},
		{`{"max_retries": -1, "backoff": 500}`, "[retry: unlimited, backoff: 500ms]"},
		{`{"max_retries": 3, "backoff": 1000, "backoff_type": "fixed"}`, "[retry: 3, backoff: 1s, backoff_kind: fixed]"},
		{`{"max_retries": 3, "backoff": 1000, "max_backoff": 60000, "backoff_type": "fixed"}`, "[retry: 3, backoff: 1s, backoff_kind: fixed]"},
		{`{"max_retries": 3, "backoff": 200, "max_backoff": 5000, "backoff_type": "linear"}`, "[retry: 3, backoff: 200ms, backoff_kind: linear, max_backoff: 5s]"},
		{`{"max_retries": 5, "backoff": 100, "max_backoff": 30000, "backoff_type": "exponential"}`, "[retry: 5, backoff: 100ms, max_backoff: 30s]"},
		{`{"max_retries": 5, "max_backoff": 10000}`, "[retry: 5, backoff: 1s, max_backoff: 10s]"},
		{`{"max_retries": 5, "backoff": 0.5}`, "[retry: 5, backoff: 500us]"},
		{`{"max_retries": 2, "backoff": 0}`, "[retry: 2, backoff_kind: none]"},
		{`{"work_config": {"max_retries": 2, "backoff": 1500}}`, "[retry: 2, backoff: 1500ms]"},
	}
	checkShapes(t, parseWorkConfig, tests)
}

func TestParseWorkConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []shapeCase{
		{`{}`, "work_config: max_retries is missing"},
		{`{"backoff": 100}`, "work_config: max_retries is missing"},
		{`{"max_retries": -2}`, "work_config.max_retries: -2 is out of range"},
		{`{"max_retries": 9223372036854775807}`, "out of range (use -1 for unlimited)"},
		{`{"max_retries": 1.5}`, "work_config.max_retries: found number 1.5, want a whole number"},
		{`{"max_retries": 3, "backoff": -5}`, "work_config.backoff: negative number -5"},
		{`{"max_retries": 3, "backoff": "1s"}`, "work_config.backoff: found string, want a number"},
		{`{"max_retries": 3, "max_backoff": 1e300}`, "work_config.max_backoff: 1e+300 milliseconds is out of range"},
		{`{"max_retries": 3, "backoff_type": "none"}`, `work_config.backoff_type: unknown type "none" (want fixed, linear or exponential)`},
		{`{"max_retries": 3, "backof": 100}`, `work_config: unknown field "backof" (want backoff, backoff_type, max_backoff, max_retries)`},
		{`{"work_config": 3}`, "work_config: found number, want an object"},
		{`"x"`, "work_config: found string, want an object"},
	}
	checkErrors(t, parseWorkConfig, tests)
}

func TestParseTemporal(t *testing.T) {
	t.Parallel()
	tests := []shapeCase{
		{`{}`, "[retry: unlimited, backoff: 1s, max_backoff: 100s]"},
		{`{"maximum_attempts": 1}`, "[retry: 0]"},
		{`{"maximum_attempts": 0}`, "[retry: unlimited, backoff: 1s, max_backoff: 100s]"},
		{`{"initial_interval": "1.5s", "backoff_coefficient": 1.5, "maximum_interval": "1m", "maximum_attempts": 5}`,
			"[retry: 4, backoff: 1500ms, multiplier: 1.5, max_backoff: 1m]"},
		{`{"initial_interval": "0.5s", "maximum_attempts": 3, "non_retryable_error_types": ["ValidationError", "AuthError"]}`,
			"[retry: 2, backoff: 500ms, max_backoff: 50s] [non_retryable: (ValidationError, AuthError)]"},
		{`{"initialInterval": "2s", "backoffCoefficient": 3, "maximumInterval": "10s", "maximumAttempts": 4, "nonRetryableErrorTypes": ["X"]}`,
			"[retry: 3, backoff: 2s, multiplier: 3, max_backoff: 10s] [non_retryable: (X)]"},
		{`{"initial_interval": "0s", "backoff_coefficient": 0, "maximum_interval": "0s", "maximum_attempts": 2}`,
			"[retry: 1, backoff: 1s, max_backoff: 100s]"},
		{`{"retry_policy": {"maximum_attempts": 2, "initial_interval": "1s", "maximum_interval": "1s"}}`, "[retry: 1, backoff: 1s, max_backoff: 1s]"},
		{`{"initial_interval": "2000000h"}`, "[retry: unlimited, backoff: 2000000h, max_backoff: 4611686018427387903ns]"},
	}
	checkShapes(t, parseTemporal, tests)
}

func TestParseTemporalErrors(t *testing.T) {
	t.Parallel()
	tests := []shapeCase{
		{`{"maximum_attempts": -1}`, "maximum_attempts: negative number -1 (want at least 1, or 0 for unlimited)"},
		{`{"backoff_coefficient": 0.5}`, "backoff_coefficient: 0.5 is out of range"},
		{`{"initial_interval": 1}`, "retry policy.initial_interval: found number, want a string"},
		{`{"initial_interval": "1 second"}`, `initial_interval: found "1 second", want a duration`},
		{`{"initial_interval": "10s", "maximum_interval": "5s"}`, "maximum_interval 5s is below initial_interval 10s"},
		{`{"maximum_attempts": 3, "non_retryable_error_types": ["bad type"]}`, `non_retryable[0]: "bad type" is not an error type name`},
		{`{"maximum_attempts": 3, "start_to_close_timeout": "5s"}`, `retry policy: unknown field "start_to_close_timeout"`},
	}
	checkErrors(t, parseTemporal, tests)
}

func TestParseAny(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want string
	}{
		{"[retry: 3, backoff: 1s]", "[retry: 3, backoff: 1s]"},
		{"  # comment\n[retry: 3]", "[retry: 3]"},
		{`  {"rules": [{"max_attempts": 4, "backoff": {"base": "1s"}}], "timeout": "5s"}`, "[retry: 3, backoff: 1s] [timeout: 5s]"},
		{`{"max_retries": 3, "backoff": 1000}`, "[retry: 3, backoff: 1s]"},
		{`{"maximum_attempts": 4, "initial_interval": "1s", "maximum_interval": "2m"}`, "[retry: 3, backoff: 1s, max_backoff: 2m]"},
		{`{"retryPolicy": {"maximumAttempts": 4}}`, "[retry: 3, backoff: 1s, max_backoff: 100s]"},
		{`{"work_config": {"max_retries": 0}}`, "[retry: 0]"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			p, err := ParseAny(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if p.String() != tt.want {
				t.Errorf("ParseAny(%q) = %s, want %s", tt.in, p, tt.want)
			}
		})
	}
}

func TestParseAnyErrors(t *testing.T) {
	t.Parallel()
	tests := []shapeCase{
		{"", "line 1, column 1: empty policy"},
		{"[retry: 3, backof: 1s]", `line 1, column 12: unknown key "backof"`},
		{"{}", "policy: empty JSON object: want reprise's shape"},
		{`{"rules": [], "non_retryable": null}`, "policy: no rules and no limits"},
		{`{"retries": 3}`, `policy: unknown field "retries": want reprise's shape (rules, timeout, deadline, non_retryable), a work_config`},
		{`{"rules": [], "max_retries": 3}`, "policy: mixes the fields of different shapes, max_retries (work_config) and rules (reprise): want one shape"},
		{`{"max_retries": 3, "maximum_attempts": 3}`, "max_retries (work_config) and maximum_attempts (Temporal)"},
		{`{"timeout": "1s"} {}`, "policy: more data after the JSON value"},
		{`{"timeout": }`, "policy: invalid JSON at byte 13"},
		{`{"timeout": "1s", "rules": [{"max_attempts": 1}] ,}`, "policy: invalid JSON at byte 51"},
		{`{"max_retries": 3, "foo": 1}`, `work_config: unknown field "foo"`},
		{`{"rules": `, "policy: unexpected EOF"},
		{`{"maximum_attempts": -3}`, "maximum_attempts: negative number -3"},
	}
	checkErrors(t, ParseAny, tests)
}
