package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files in testdata")

// run runs the command in process and returns what a terminal would show.
func runMain(args ...string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	code = Main(args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// TestGolden runs each command line and compares its output and exit code
// with testdata/NAME.golden (go test -update rewrites them).
func TestGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
	}{
		{"usage", nil},
		{"help", []string{"help"}},
		{"unknown_command", []string{"frobnicate"}},
		{"policy_usage", []string{"policy"}},
		{"policy_unknown", []string{"policy", "lint", "[retry: 3]"}},
		{"check", []string{"policy", "check", "[retry: 3, backoff: 60] [timeout: 2m]"}},
		{"check_unquoted", []string{"policy", "check", "[retry:", "3,", "backoff:", "1s]"}},
		{"check_json", []string{"policy", "check", "--json", "[NetworkError -> retry: 5, backoff: 100ms, jitter: full] [deadline: 1h]"}},
		{"check_temporal", []string{"policy", "check", `{"initial_interval": "1s", "maximum_attempts": 5, "non_retryable_error_types": ["InvalidArgument"]}`}},
		{"check_work_config", []string{"policy", "check", `{"max_retries": 3, "backoff": 250, "backoff_type": "linear"}`}},
		{"check_error", []string{"policy", "check", "[retry: 3, backof: 1s]"}},
		{"check_error_multiline", []string{"policy", "check", "[retry: 3]  # ok\n\t[timeout: 5s, deadline: -1h]"}},
		{"check_error_json", []string{"policy", "check", `{"rules": [{"max_attempts": 3, "backoff": {"base": "1s", "cap": "1m"}}]}`}},
		{"check_missing", []string{"policy", "check"}},
		{"check_help", []string{"policy", "check", "-h"}},
		{"explain", []string{"policy", "explain", "[retry: 3, backoff: 1s]"}},
		{"explain_spec_timeout", []string{"policy", "explain", "[retry: 5] [Timeout -> retry: 0]", "--error", "Timeout"}},
		{"explain_spec_network", []string{"policy", "explain", "--error", "OpError", "--error", "NetworkError", "[retry: 3] [NetworkError -> retry: 5]"}},
		{"explain_unlimited", []string{"policy", "explain", "[retry: unlimited, backoff: 100ms, max_backoff: 1s]"}},
		{"explain_unlimited_attempts", []string{"policy", "explain", "[retry: unlimited, backoff_kind: none]", "--attempts", "3"}},
		{"explain_jitter_deadline", []string{"policy", "explain", "[retry: unlimited, backoff: 100ms, max_backoff: 1s, jitter: full] [deadline: 3s]", "--key", "run-7/charge"}},
		{"explain_linear", []string{"policy", "explain", "[retry: 4, backoff: 1s, backoff_kind: linear]"}},
		{"explain_non_retryable", []string{"policy", "explain", "[retry: 3] [non_retryable: (ValidationError)]", "--error", "HTTPError,ValidationError"}},
		{"explain_not_covered", []string{"policy", "explain", "[NetworkError -> retry: 5]"}},
		{"explain_json", []string{"policy", "explain", "[retry: 3, backoff: 100ms]", "--json"}},
		{"explain_json_deadline", []string{"policy", "explain", "--json", "[retry: unlimited, backoff: 1s, backoff_kind: fixed] [deadline: 2500ms]"}},
		{"explain_json_unlimited", []string{"policy", "explain", "--json", "--attempts=2", "[retry: unlimited]"}},
		{"explain_dashdash", []string{"policy", "explain", "--json", "--", "[retry: 1]"}},
		{"explain_bad_flag", []string{"policy", "explain", "[retry: 3]", "--attempt", "3"}},
		{"explain_bad_attempts", []string{"policy", "explain", "[retry: 3]", "--attempts", "three"}},
		{"explain_negative_attempts", []string{"policy", "explain", "[retry: 3]", "--attempts", "-1"}},
		{"explain_bad_error", []string{"policy", "explain", "[retry: 3]", "--error", "Network Error"}},
		{"explain_empty_error", []string{"policy", "explain", "[retry: 3]", "--error", "A,,B"}},
		{"explain_error", []string{"policy", "explain", "[retry: 3] [backoff: 1s]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := runMain(tt.args...)
			got := fmt.Sprintf("$ reprise %s\nexit %d\n-- stdout --\n%s-- stderr --\n%s", quoteArgs(tt.args), code, stdout, stderr)
			path := filepath.Join("testdata", tt.name+".golden")
			if *updateGolden {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to write it)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs:\n--- got\n%s--- want\n%s", path, got, want)
			}
		})
	}
}

// quoteArgs writes args as a shell would need them.
func quoteArgs(args []string) string {
	var q []string
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n[]{}\"'(),#>") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q = append(q, a)
	}
	return strings.Join(q, " ")
}

// The exit codes and streams, independent of the golden files' wording.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args   []string
		code   int
		stdout bool // whether stdout has output
	}{
		{[]string{"policy", "check", "[retry: 3]"}, 0, true},
		{[]string{"policy", "check", "[retry: x]"}, 2, false},
		{[]string{"policy", "explain", "[retry: 3]"}, 0, true},
		{[]string{"policy", "explain", "[retry: 3]", "--nope"}, 2, false},
		{[]string{"policy", "explain", "-h"}, 0, true},
		{[]string{"nope"}, 2, false},
		{nil, 2, false},
	}
	for _, tt := range tests {
		stdout, stderr, code := runMain(tt.args...)
		if code != tt.code || (stdout != "") != tt.stdout || (code != 0) != (stderr != "") {
			t.Errorf("reprise %q: exit %d, stdout %q, stderr %q; want exit %d", tt.args, code, stdout, stderr, tt.code)
		}
	}
}

// The --json output of explain has the documented shape.
func TestExplainJSON(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := runMain("policy", "explain", "[retry: 3, backoff: 100ms]", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got struct {
		Policy   string `json:"policy"`
		Attempts []struct {
			Attempt  int    `json:"attempt"`
			Decision string `json:"decision"`
			DelayMS  *int64 `json:"delay_ms"`
			Rule     *int   `json:"rule"`
			Reason   string `json:"reason"`
		} `json:"attempts"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatal(err)
	}
	if got.Policy != "[retry: 3, backoff: 100ms]" || len(got.Attempts) != 4 {
		t.Fatalf("got %+v", got)
	}
	for i, a := range got.Attempts[:3] {
		want := int64(100 << i)
		if a.Attempt != i+1 || a.Decision != "retry" || a.DelayMS == nil || *a.DelayMS != want || a.Rule == nil || *a.Rule != 0 {
			t.Errorf("attempt %d: %+v, want retry after %dms by rule 0", i+1, a, want)
		}
	}
	if last := got.Attempts[3]; last.Attempt != 4 || last.Decision != "stop" || last.Reason != "exhausted" || last.DelayMS != nil {
		t.Errorf("last attempt %+v, want stop, exhausted", last)
	}
}

func TestParseArgs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		pos  []string
		n    int
		json bool
	}{
		{[]string{"a", "b"}, []string{"a", "b"}, 0, false},
		{[]string{"--n", "3", "a"}, []string{"a"}, 3, false},
		{[]string{"a", "--n=3", "b", "--json"}, []string{"a", "b"}, 3, true},
		{[]string{"a", "--", "--n", "3"}, []string{"a", "--n", "3"}, 0, false},
		{[]string{"--json", "--", "-x"}, []string{"-x"}, 0, true},
	}
	for _, tt := range tests {
		fs := newFlagSet("test", "")
		n := fs.Int("n", 0, "")
		j := fs.Bool("json", false, "")
		pos, _, ok := parseArgs(fs, tt.args, &bytes.Buffer{}, &bytes.Buffer{})
		if !ok || strings.Join(pos, "|") != strings.Join(tt.pos, "|") || *n != tt.n || *j != tt.json {
			t.Errorf("parseArgs(%q) = %q, n %d, json %v, ok %v; want %q, %d, %v", tt.args, pos, *n, *j, ok, tt.pos, tt.n, tt.json)
		}
	}
}
