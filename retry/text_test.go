package retry

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func mustParse(t testing.TB, s string) Policy {
	t.Helper()
	p, err := Parse(s)
	if err != nil {
		t.Fatalf("Parse(%q): %v", s, err)
	}
	return p
}

// Every example line of the text form (docs/policies.md), read field by field.
func TestParseSpecExamples(t *testing.T) {
	t.Parallel()
	const s, m = time.Second, time.Minute
	tests := []struct {
		text  string
		want  Policy
		canon string
	}{
		{
			"[retry: 3, backoff: 60]                          # catch-all: 3 retries, exponential from 60 s",
			Policy{Rules: []Rule{{MaxAttempts: 4, Backoff: Exponential(60*s, 2, 0)}}},
			"[retry: 3, backoff: 1m]",
		},
		{
			"[NetworkError -> retry: 5, backoff: 2m]          # only for NetworkError",
			Policy{Rules: []Rule{{On: []string{"NetworkError"}, MaxAttempts: 6, Backoff: Exponential(2*m, 2, 0)}}},
			"[NetworkError -> retry: 5, backoff: 2m]",
		},
		{
			"[(ValueError, KeyError) -> retry: 3, backoff: 30s]",
			Policy{Rules: []Rule{{On: []string{"ValueError", "KeyError"}, MaxAttempts: 4, Backoff: Exponential(30*s, 2, 0)}}},
			"[(ValueError, KeyError) -> retry: 3, backoff: 30s]",
		},
		{
			"[RateLimitError -> retry: 10, backoff: 1m] [NetworkError -> retry: 3, backoff: 30s]",
			Policy{Rules: []Rule{
				{On: []string{"RateLimitError"}, MaxAttempts: 11, Backoff: Exponential(m, 2, 0)},
				{On: []string{"NetworkError"}, MaxAttempts: 4, Backoff: Exponential(30*s, 2, 0)},
			}},
			"[RateLimitError -> retry: 10, backoff: 1m] [NetworkError -> retry: 3, backoff: 30s]",
		},
		{
			"[retry: 3, backoff: 60] [timeout: 2m]            # timeout in its own bracket",
			Policy{Rules: []Rule{{MaxAttempts: 4, Backoff: Exponential(60*s, 2, 0)}}, Timeout: 2 * m},
			"[retry: 3, backoff: 1m] [timeout: 2m]",
		},
		{
			"[retry: unlimited, backoff: 100ms, max_backoff: 30s, jitter: full] [timeout: 5s, deadline: 1h]",
			Policy{
				Rules:    []Rule{{MaxAttempts: Unlimited, Backoff: Exponential(100*time.Millisecond, 2, 30*s).WithJitter(JitterFull)}},
				Timeout:  5 * s,
				Deadline: time.Hour,
			},
			"[retry: unlimited, backoff: 100ms, max_backoff: 30s, jitter: full] [timeout: 5s, deadline: 1h]",
		},
		{
			"[retry: 4, backoff: 1s, backoff_kind: linear]    # kinds: none, fixed, linear, exponential",
			Policy{Rules: []Rule{{MaxAttempts: 5, Backoff: Linear(s, 0)}}},
			"[retry: 4, backoff: 1s, backoff_kind: linear]",
		},
		{
			"[Timeout -> retry: 0]                            # never retry a timed-out attempt",
			Policy{Rules: []Rule{{On: []string{"Timeout"}, MaxAttempts: 1, Backoff: None}}},
			"[Timeout -> retry: 0]",
		},
	}
	for _, tt := range tests {
		t.Run(tt.canon, func(t *testing.T) {
			t.Parallel()
			checkParse(t, tt.text, tt.want, tt.canon)
		})
	}
}

// checkParse checks that text parses as want, prints as canon, and reads
// back from canon as want.
func checkParse(t *testing.T, text string, want Policy, canon string) {
	t.Helper()
	got := mustParse(t, text)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse(%q)\n got %#v\nwant %#v", text, got, want)
	}
	if s := got.String(); s != canon {
		t.Errorf("String() = %q, want %q", s, canon)
	}
	if again := mustParse(t, got.String()); !reflect.DeepEqual(again, got) {
		t.Errorf("Parse(String()) = %#v, want %#v", again, got)
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	const s, ms = time.Second, time.Millisecond
	rule := func(n int, b Backoff, on ...string) Policy {
		return Policy{Rules: []Rule{{On: on, MaxAttempts: n, Backoff: b}}}
	}
	tests := []struct {
		text  string
		want  Policy
		canon string
	}{
		// retry and its defaults
		{"[retry: 2]", rule(3, DefaultBackoff), "[retry: 2]"},
		{"[retry: -1]", rule(Unlimited, DefaultBackoff), "[retry: unlimited]"},
		{"[retry: +2]", rule(3, DefaultBackoff), "[retry: 2]"},
		{"[retry: 0, backoff: 5s, jitter: full]", rule(1, None), "[retry: 0]"},
		{"[retry: 3, jitter: equal]", rule(4, DefaultBackoff.WithJitter(JitterEqual)), "[retry: 3, backoff: 1s, max_backoff: 1m, jitter: equal]"},
		{"[retry: 3, max_backoff: 0]", rule(4, Exponential(s, 2, 0)), "[retry: 3, backoff: 1s]"},
		{"[retry: 3, multiplier: 3]", rule(4, Exponential(s, 3, time.Minute)), "[retry: 3, backoff: 1s, multiplier: 3, max_backoff: 1m]"},
		{"[backoff: 2s, retry: 1]", rule(2, Exponential(2*s, 2, 0)), "[retry: 1, backoff: 2s]"},
		// kinds
		{"[retry: 3, backoff_kind: none]", rule(4, None), "[retry: 3, backoff_kind: none]"},
		{"[retry: 3, backoff: 0]", rule(4, None), "[retry: 3, backoff_kind: none]"},
		{"[retry: 3, backoff: 2s, backoff_kind: fixed]", rule(4, Fixed(2*s)), "[retry: 3, backoff: 2s, backoff_kind: fixed]"},
		{"[retry: 3, backoff_kind: fixed]", rule(4, Fixed(s)), "[retry: 3, backoff: 1s, backoff_kind: fixed]"},
		{"[retry: 3, backoff_kind: linear]", rule(4, Linear(s, time.Minute)), "[retry: 3, backoff: 1s, backoff_kind: linear, max_backoff: 1m]"},
		{"[retry: 3, backoff_kind: exponential]", rule(4, DefaultBackoff), "[retry: 3]"},
		{"[retry: 3, backoff: 1s, backoff_kind: exponential, multiplier: 1.5, max_backoff: 10s, jitter: none]",
			rule(4, Exponential(s, 1.5, 10*s)), "[retry: 3, backoff: 1s, multiplier: 1.5, max_backoff: 10s]"},
		{"[retry: 3, backoff: 100ms, multiplier: 1e9]", rule(4, Exponential(100*ms, 1e9, 0)), "[retry: 3, backoff: 100ms, multiplier: 1e+09]"},
		{"[retry: 3, backoff: 1s, backoff_kind: linear, max_backoff: 5s, jitter: full]",
			rule(4, Linear(s, 5*s).WithJitter(JitterFull)), "[retry: 3, backoff: 1s, backoff_kind: linear, max_backoff: 5s, jitter: full]"},
		// durations
		{"[retry: 1, backoff: 0.5]", rule(2, Exponential(500*ms, 2, 0)), "[retry: 1, backoff: 500ms]"},
		{"[retry: 1, backoff: 1m30s]", rule(2, Exponential(90*s, 2, 0)), "[retry: 1, backoff: 90s]"},
		{"[retry: 1, backoff: 1.5h]", rule(2, Exponential(90*time.Minute, 2, 0)), "[retry: 1, backoff: 90m]"},
		{"[retry: 1, backoff: 2d]", rule(2, Exponential(48*time.Hour, 2, 0)), "[retry: 1, backoff: 2d]"},
		{"[retry: 1, backoff: 1d12h]", rule(2, Exponential(36*time.Hour, 2, 0)), "[retry: 1, backoff: 36h]"},
		{"[retry: 1, backoff: 250us]", rule(2, Exponential(250*time.Microsecond, 2, 0)), "[retry: 1, backoff: 250us]"},
		{"[retry: 1, backoff: 3µs]", rule(2, Exponential(3*time.Microsecond, 2, 0)), "[retry: 1, backoff: 3us]"},
		{"[retry: 1, backoff: 7ns]", rule(2, Exponential(7, 2, 0)), "[retry: 1, backoff: 7ns]"},
		{"[retry: 1, backoff: 1.0000000015s]", rule(2, Exponential(s+1, 2, 0)), "[retry: 1, backoff: 1000000001ns]"},
		{"[retry: 1, backoff: .25s]", rule(2, Exponential(250*ms, 2, 0)), "[retry: 1, backoff: 250ms]"},
		// filters and limits
		{"[(A) -> retry: 1]", rule(2, DefaultBackoff, "A"), "[A -> retry: 1]"},
		{"[pkg.Error -> retry: 1]", rule(2, DefaultBackoff, "pkg.Error"), "[pkg.Error -> retry: 1]"},
		{"[retry -> retry: 1]", rule(2, DefaultBackoff, "retry"), "[retry -> retry: 1]"},
		{"[non_retryable: A]", Policy{NonRetryable: []string{"A"}}, "[non_retryable: (A)]"},
		{"[deadline: 1h] [retry: 1] [non_retryable: (A, B)] [timeout: 30]",
			Policy{Rules: rule(2, DefaultBackoff).Rules, Timeout: 30 * s, Deadline: time.Hour, NonRetryable: []string{"A", "B"}},
			"[retry: 1] [timeout: 30s, deadline: 1h, non_retryable: (A, B)]"},
		// layout: spaces, line breaks, comments
		{"[retry:3,backoff:1s]", rule(4, Exponential(s, 2, 0)), "[retry: 3, backoff: 1s]"},
		{"  # a policy\n[retry: 3,   # three retries\n backoff: 1s]  # then\n[timeout: 5s]\n",
			Policy{Rules: rule(4, Exponential(s, 2, 0)).Rules, Timeout: 5 * s}, "[retry: 3, backoff: 1s] [timeout: 5s]"},
		{"[retry: 3]\t\r\n[Timeout -> retry: 0]", Policy{Rules: []Rule{{MaxAttempts: 4, Backoff: DefaultBackoff}, {On: []string{"Timeout"}, MaxAttempts: 1}}},
			"[retry: 3] [Timeout -> retry: 0]"},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			t.Parallel()
			checkParse(t, tt.text, tt.want, tt.canon)
		})
	}
}

// Every kind of mistake, with the place it is reported.
func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		text      string
		line, col int
		msg       string // a part of the message
	}{
		// garbage and structure
		{"", 1, 1, "empty policy"},
		{"   # only a comment", 1, 20, "empty policy"},
		{"retry: 3", 1, 1, `found "retry", want '[' to start a bracket`},
		{"[retry: 3] x", 1, 12, `found "x", want '['`},
		{"[retry: 3", 1, 10, "found end of input, want ',' or ']'"},
		{"[retry: 3]]", 1, 11, "found ']', want '['"},
		{"[retry: 3 backoff: 1s]", 1, 11, `found "backoff", want ',' or ']'`},
		{"[retry 3]", 1, 8, `found "3", want ':' after retry`},
		{"[retry: ]", 1, 9, "found ']', want a value for retry"},
		{"[retry: 3,]", 1, 11, "found ']', want a key"},
		{"[retry: 3, , backoff: 1s]", 1, 12, "found ',', want a key"},
		{"[retry: 3] {", 1, 12, "unexpected character '{'"},
		{"[retry: 3; backoff: 1s]", 1, 10, "unexpected character ';'"},
		{"[retry: 3]\n[retry: 3, backoff: 1s\n", 3, 1, "found end of input"},
		{"[retry: \xff]", 1, 9, "unexpected character byte 0xff"},
		{"[é: 3]", 1, 2, "unexpected character 'é'"},
		// empty brackets and lists
		{"[]", 1, 2, "empty bracket"},
		{"[retry: 3] [ ]", 1, 14, "empty bracket"},
		{"[() -> retry: 3]", 1, 3, "empty list"},
		{"[non_retryable: ()]", 1, 18, "empty list"},
		{"[A -> ]", 1, 7, "found ']', want a key"},
		{"[(A, B retry: 3]", 1, 8, `found "retry", want ',' or ')'`},
		{"[(A, B", 1, 7, "want ')' to close the '(' at line 1, column 2"},
		{"[(A, 3x) -> retry: 3]", 1, 6, `found "3x", want an error type name`},
		{"[(A, A) -> retry: 3]", 1, 6, "A given twice"},
		{"[(A) retry: 3]", 1, 6, `found "retry", want '->' after a type filter`},
		{"[A B -> retry: 3]", 1, 2, `unknown key "A" (want a key, or a type filter written Type -> retry: N)`},
		// keys
		{"[retry: 3, backof: 1s]", 1, 12, `unknown key "backof" (did you mean backoff?)`},
		{"[Timeout: 5s]", 1, 2, "did you mean timeout?"},
		{"[retry: 3, colour: red]", 1, 12, `unknown key "colour" (want retry, backoff`},
		{"[retry: 3, retry: 4]", 1, 12, "duplicate key retry in one bracket (first at line 1, column 2)"},
		{"[retry: 3, backoff: 1s, backoff: 2s]", 1, 25, "duplicate key backoff"},
		{"[backoff: 1s]", 1, 2, "backoff outside a rule: add retry: N"},
		{"[timeout: 1s, jitter: full]", 1, 15, "jitter outside a rule"},
		{"[retry: 3, timeout: 2s]", 1, 12, "timeout is policy-wide and cannot stand in a rule"},
		{"[retry: 3, non_retryable: (A)]", 1, 12, "non_retryable is policy-wide"},
		{"[Timeout -> timeout: 5s]", 1, 2, "type filter on a bracket without retry"},
		{"[timeout: 1s] [timeout: 2s]", 1, 16, "timeout given twice (first at line 1, column 2)"},
		{"[deadline: 1h]\n[retry: 1]\n[deadline: 2h]", 3, 2, "deadline given twice (first at line 1, column 2)"},
		{"[non_retryable: A] [timeout: 1s, non_retryable: B]", 1, 34, "non_retryable given twice"},
		// values
		{"[retry: -2]", 1, 9, "retry: negative number -2"},
		{"[retry: three]", 1, 9, `found "three", want a whole number of retries or unlimited`},
		{"[retry: 2.5]", 1, 9, "want a whole number"},
		{"[retry: 99999999999999999999]", 1, 9, "out of range"},
		{"[retry: 9223372036854775807]", 1, 9, "out of range (use unlimited)"},
		{"[retry: 3, backoff: -1s]", 1, 21, "negative duration -1s"},
		{"[retry: 3, backoff: 5x]", 1, 21, `backoff: found "5x", want a duration`},
		{"[retry: 3, backoff: 1s2]", 1, 21, "want a duration"},
		{"[retry: 3, backoff: s]", 1, 21, "want a duration"},
		{"[retry: 3, backoff: 1e3]", 1, 21, "want a duration"},
		{"[retry: 3, backoff: 5min]", 1, 21, "want a duration"},
		{"[retry: 3, backoff: 300000d]", 1, 21, "out of range"},
		{"[retry: 3, backoff: 9223372036854775807ns1ns]", 1, 21, "out of range"},
		{"[retry: 3, backoff: 99999999999999999999999ns]", 1, 21, "out of range"},
		{"[retry: 3, backoff_kind: quadratic]", 1, 26, `unknown backoff kind "quadratic"`},
		{"[retry: 3, jitter: half]", 1, 20, `unknown jitter "half"`},
		{"[retry: 3, multiplier: 0.5]", 1, 24, "0.5 is out of range: want a finite number ≥ 1"},
		{"[retry: 3, multiplier: -2]", 1, 24, "negative number -2"},
		{"[retry: 3, multiplier: NaN]", 1, 24, "out of range"},
		{"[retry: 3, multiplier: inf]", 1, 24, "out of range"},
		{"[retry: 3, multiplier: 1e999]", 1, 24, "out of range"},
		{"[retry: 3, multiplier: two]", 1, 24, `found "two", want a number ≥ 1`},
		{"[timeout: 0]", 1, 11, "timeout: found 0, want a positive duration (for no timeout, leave the key out)"},
		{"[deadline: -5m]", 1, 12, "negative duration"},
		// keys that cannot apply to the kind written
		{"[retry: 3, backoff: 1s, backoff_kind: none]", 1, 12, "backoff does not apply to backoff_kind none"},
		{"[retry: 3, backoff_kind: none, jitter: full]", 1, 32, "jitter does not apply to backoff_kind none"},
		{"[retry: 3, backoff: 1s, backoff_kind: fixed, max_backoff: 5s]", 1, 46, "max_backoff does not apply to backoff_kind fixed"},
		{"[retry: 3, backoff: 1s, backoff_kind: linear, multiplier: 3]", 1, 47, "multiplier does not apply to backoff_kind linear"},
		// columns count characters, not bytes
		{"[retry: 3, backoff: 1µs, jitter: µ]", 1, 34, `unknown jitter "µ"`},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			t.Parallel()
			p, err := Parse(tt.text)
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Parse(%q) = %v, %v; want a *SyntaxError", tt.text, p, err)
			}
			if se.Line != tt.line || se.Column != tt.col || !strings.Contains(se.Msg, tt.msg) {
				t.Errorf("Parse(%q):\n got %d:%d %s\nwant %d:%d …%s…", tt.text, se.Line, se.Column, se.Msg, tt.line, tt.col, tt.msg)
			}
			if want := "line "; !strings.HasPrefix(err.Error(), want) {
				t.Errorf("Error() = %q, want it to start with %q", err.Error(), want)
			}
		})
	}
}

// Policies built in Go print to text that reads back as the same policy,
// normalised.
func TestStringRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p     Policy
		canon string
	}{
		{Default, "[retry: 2]"},
		{Never, "[retry: 0]"},
		{Attempts(0, Fixed(time.Second)), "[retry: 0]"},
		{Attempts(Unlimited, None), "[retry: unlimited, backoff_kind: none]"},
		{Attempts(5, Fixed(0)), "[retry: 4, backoff_kind: none]"},
		{Attempts(5, Backoff{Kind: BackoffFixed, Base: time.Second, Multiplier: 9, Max: time.Millisecond}), "[retry: 4, backoff: 1s, backoff_kind: fixed]"},
		{Attempts(5, Backoff{Kind: BackoffLinear, Base: time.Second, Multiplier: 9}), "[retry: 4, backoff: 1s, backoff_kind: linear]"},
		{Attempts(5, Backoff{Kind: BackoffNone, Base: time.Second, Jitter: JitterFull}), "[retry: 4, backoff_kind: none]"},
		{Attempts(3, Exponential(time.Second, 0, time.Minute)), "[retry: 2]"},
		{Attempts(3, Exponential(1500*time.Millisecond, 2.5, 0).WithJitter(JitterEqual)), "[retry: 2, backoff: 1500ms, multiplier: 2.5, jitter: equal]"},
		{Policy{Rules: []Rule{{On: []string{"A", "B", "A"}, MaxAttempts: 2}}, NonRetryable: []string{"X", "X"}}, "[(A, B) -> retry: 1, backoff_kind: none] [non_retryable: (X)]"},
		{Policy{Rules: []Rule{}, Timeout: time.Second}, "[timeout: 1s]"},
		{Default.WithRule(Rule{On: []string{"Timeout"}, MaxAttempts: 1}).WithTimeout(30 * time.Second).WithDeadline(24 * time.Hour).WithNonRetryable("ValidationError"),
			"[retry: 2] [Timeout -> retry: 0] [timeout: 30s, deadline: 1d, non_retryable: (ValidationError)]"},
	}
	for _, tt := range tests {
		t.Run(tt.canon, func(t *testing.T) {
			t.Parallel()
			if s := tt.p.String(); s != tt.canon {
				t.Errorf("String() = %q, want %q", s, tt.canon)
			}
			if got, want := mustParse(t, tt.p.String()), tt.p.Normalize(); !reflect.DeepEqual(got, want) {
				t.Errorf("Parse(String()) = %#v, want %#v", got, want)
			}
		})
	}
	if s := (Policy{}).String(); s != "" {
		t.Errorf("zero Policy prints %q, want the empty string", s)
	}
}

func TestParseNever(t *testing.T) {
	t.Parallel()
	if p := mustParse(t, "[retry: 0]"); !reflect.DeepEqual(p, Never) {
		t.Errorf("Parse([retry: 0]) = %#v, want Never %#v", p, Never)
	}
}

func TestNormalizeDoesNotModify(t *testing.T) {
	t.Parallel()
	p := Policy{Rules: []Rule{{On: []string{"A", "A"}, MaxAttempts: 0, Backoff: Fixed(time.Second)}}, NonRetryable: []string{"B", "B"}}
	p.Normalize()
	if p.Rules[0].MaxAttempts != 0 || len(p.Rules[0].On) != 2 || len(p.NonRetryable) != 2 || p.Rules[0].Backoff.Kind != BackoffFixed {
		t.Errorf("Normalize modified its receiver: %#v", p)
	}
}

func TestRuleString(t *testing.T) {
	t.Parallel()
	r := Rule{On: []string{"NetworkError"}, MaxAttempts: 6, Backoff: Exponential(2*time.Minute, 2, 0)}
	if got, want := r.String(), "[NetworkError -> retry: 5, backoff: 2m]"; got != want {
		t.Errorf("Rule.String() = %q, want %q", got, want)
	}
}

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0"},
		{time.Nanosecond, "1ns"},
		{1500 * time.Nanosecond, "1500ns"},
		{2 * time.Microsecond, "2us"},
		{time.Millisecond, "1ms"},
		{1500 * time.Millisecond, "1500ms"},
		{time.Second, "1s"},
		{90 * time.Second, "90s"},
		{time.Minute, "1m"},
		{time.Hour, "1h"},
		{36 * time.Hour, "36h"},
		{48 * time.Hour, "2d"},
		{-time.Second, "-1s"},
		{1<<63 - 1, "9223372036854775807ns"},
	}
	for _, tt := range tests {
		got := formatDuration(tt.d)
		if got != tt.want {
			t.Errorf("formatDuration(%v) = %q, want %q", tt.d, got, tt.want)
		}
		if tt.d >= 0 {
			if back, err := parseDuration(got); err != nil || back != tt.d {
				t.Errorf("parseDuration(%q) = %v, %v; want %v", got, back, err, tt.d)
			}
		}
	}
}

func BenchmarkParse(b *testing.B) {
	const text = "[retry: 5, backoff: 100ms, max_backoff: 30s, jitter: full] [(NetworkError, Timeout) -> retry: 10, backoff: 1s] [timeout: 5s, deadline: 1h, non_retryable: (ValidationError)]"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(text); err != nil {
			b.Fatal(err)
		}
	}
}
