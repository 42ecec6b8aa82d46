package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"reprise/retry"
)

const policyUsage = `usage: reprise policy <command> '<policy>' [flags]

commands:
  check     print the policy in its canonical form (--json: in reprise's JSON shape)
  explain   show what the policy decides if every attempt fails

A policy is the text form, such as '[retry: 3, backoff: 1s] [timeout: 30s]',
or JSON in reprise's, work_config's or Temporal's shape (see docs/policies.md).
`

func policyMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, policyUsage)
		return exitUsage
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "check":
		return policyCheck(args, stdout, stderr)
	case "explain":
		return policyExplain(args, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, policyUsage)
		return exitOK
	}
	fmt.Fprintf(stderr, "reprise policy: unknown command %q\n\n%s", cmd, policyUsage)
	return exitUsage
}

func policyCheck(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("policy check", "'<policy>' [--json]")
	asJSON := fs.Bool("json", false, "print the policy in reprise's JSON shape instead of the text form")
	pos, code, ok := parseArgs(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	p, code, ok := readPolicy(fs, pos, stderr)
	if !ok {
		return code
	}
	if *asJSON {
		return writeJSON(fs, stdout, stderr, p)
	}
	fmt.Fprintln(stdout, p)
	return exitOK
}

// writeJSON prints v as indented JSON and returns the exit code.
func writeJSON(fs *flag.FlagSet, stdout, stderr io.Writer, v any) int {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return exitFail
	}
	fmt.Fprintf(stdout, "%s\n", data)
	return exitOK
}

// readPolicy parses the positional arguments, joined by spaces (so that an
// unquoted policy still reads), as a policy in any accepted shape. On error
// it prints where the policy is wrong.
func readPolicy(fs *flag.FlagSet, pos []string, stderr io.Writer) (retry.Policy, int, bool) {
	if len(pos) == 0 {
		return retry.Policy{}, usageErrorf(fs, stderr, "missing the policy, such as '[retry: 3, backoff: 1s]'"), false
	}
	text := strings.Join(pos, " ")
	p, err := retry.ParseAny(text)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		var se *retry.SyntaxError
		if errors.As(err, &se) {
			writeCaret(stderr, text, se.Line, se.Column)
		}
		return retry.Policy{}, exitUsage, false
	}
	return p, exitOK, true
}

// writeCaret prints line number line of text, indented, and a caret under
// its column (both from 1, the column in characters).
func writeCaret(w io.Writer, text string, line, column int) {
	lines := strings.Split(text, "\n")
	if line < 1 || line > len(lines) {
		return
	}
	src := strings.TrimRight(lines[line-1], "\r")
	var pad strings.Builder
	for i, r := range []rune(src) {
		if i >= column-1 {
			break
		}
		if r == '\t' {
			pad.WriteRune('\t')
		} else {
			pad.WriteRune(' ')
		}
	}
	fmt.Fprintf(w, "  %s\n  %s^\n", src, pad.String())
}

// An explainedAttempt is one line of policy explain; its JSON is the
// --json output's.
type explainedAttempt struct {
	Attempt  int    `json:"attempt"`
	Decision string `json:"decision"` // retry or stop
	DelayMS  *int64 `json:"delay_ms,omitempty"`
	AtMS     *int64 `json:"at_ms,omitempty"`
	Rule     *int   `json:"rule,omitempty"` // index in the policy's rules
	Reason   string `json:"reason,omitempty"`

	delay, at time.Duration
	why       string // the reason, for a person
}

type explanation struct {
	Policy     string             `json:"policy"`
	ErrorTypes []string           `json:"error_types"`
	Attempts   []explainedAttempt `json:"attempts"`
	// More is true when the listing stopped at --attempts while the policy
	// would retry again.
	More bool `json:"more,omitempty"`
}

const explainSynopsis = "'<policy>' [--error TYPE]... [--attempts N] [--key K] [--json]"

func policyExplain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("policy explain", explainSynopsis)
	var types stringsFlag
	fs.Var(&types, "error", "a `TYPE` in the chain of the error every attempt fails with, outermost first;\nrepeat or separate with commas for a chain (default Error)")
	limit := fs.Int("attempts", 0, "list at most `N` attempts (default: as many as the policy allows, at most 100;\n10 when it retries without limit)")
	key := fs.String("key", "", "the idempotency key that seeds the jitter")
	asJSON := fs.Bool("json", false, "print the explanation as JSON")
	pos, code, ok := parseArgs(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if *limit < 0 {
		return usageErrorf(fs, stderr, "--attempts %d: want a number of attempts, 1 or more", *limit)
	}
	for _, t := range types {
		if strings.ContainsAny(t, " \t\n()[]:") {
			return usageErrorf(fs, stderr, "--error %q: want an error type name, such as NetworkError", t)
		}
	}
	if len(types) == 0 {
		types = stringsFlag{"Error"}
	}
	p, code, ok := readPolicy(fs, pos, stderr)
	if !ok {
		return code
	}
	ex := explain(&p, types, *key, *limit)
	if *asJSON {
		return writeJSON(fs, stdout, stderr, ex)
	}
	writeExplanation(stdout, &p, ex)
	return exitOK
}

// explain lists the decisions of p when every attempt fails at once with an
// error of the given type chain, up to limit attempts (0 for the default):
// retry.Policy.Explain, for a person and as JSON.
func explain(p *retry.Policy, types []string, key string, limit int) explanation {
	ex := explanation{Policy: p.String(), ErrorTypes: types}
	decisions, more := p.Explain(retry.Failure{Attempt: 1, Types: types, Key: key}, limit)
	for _, d := range decisions {
		a := explainedAttempt{Attempt: d.Attempt, Decision: "stop", Reason: string(d.Reason)}
		if d.Rule >= 0 {
			a.Rule = &d.Rule
		}
		if d.Retry {
			delay, atMS := d.Delay.Milliseconds(), d.At.Milliseconds()
			a.Decision, a.DelayMS, a.AtMS, a.delay, a.at = "retry", &delay, &atMS, d.Delay, d.At
		} else {
			a.why = stopReason(p, d.Decision, types, d.At)
		}
		ex.Attempts = append(ex.Attempts, a)
	}
	ex.More = more
	return ex
}

// stopReason says for a person why the policy stops.
func stopReason(p *retry.Policy, d retry.Decision, types []string, at time.Duration) string {
	switch d.Reason {
	case retry.ReasonExhausted:
		r := p.Rules[d.Rule]
		if r.MaxAttempts == 1 {
			return fmt.Sprintf("exhausted: %s allows 1 attempt", r)
		}
		return fmt.Sprintf("exhausted: %s allows %d attempts", r, r.MaxAttempts)
	case retry.ReasonPermanent:
		for _, t := range types {
			if slices.Contains(p.NonRetryable, t) {
				return fmt.Sprintf("permanent: %s is non_retryable", t)
			}
		}
		return "permanent"
	case retry.ReasonNotCovered:
		return fmt.Sprintf("not covered: no rule covers %s", strings.Join(types, ", "))
	case retry.ReasonDeadline:
		return fmt.Sprintf("deadline: a retry after %s would start at %s, past the %s deadline",
			short(d.Delay), short(at+d.Delay), short(p.Deadline))
	}
	return string(d.Reason)
}

func writeExplanation(w io.Writer, p *retry.Policy, ex explanation) {
	fmt.Fprintf(w, "policy  %s\nerror   %s, every attempt failing at once\n\n", ex.Policy, strings.Join(ex.ErrorTypes, " > "))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "attempt\tthen\tat\trule")
	lastRule := -1
	for _, a := range ex.Attempts {
		if a.Decision == "retry" {
			rule := `"` // ditto: as above
			if *a.Rule != lastRule {
				rule, lastRule = p.Rules[*a.Rule].String(), *a.Rule
			}
			fmt.Fprintf(tw, "%d\tretry after %s\t%s\t%s\n", a.Attempt, short(a.delay), short(a.at), rule)
			continue
		}
		fmt.Fprintf(tw, "%d\tstop, %s\n", a.Attempt, a.why)
	}
	tw.Flush()
	if ex.More {
		fmt.Fprintf(w, "… and the policy would retry again (raise --attempts to see more)\n")
	}
}

// short prints a duration rounded to the millisecond: 1s, 1.5s, 261ms, 1m4s.
func short(d time.Duration) string {
	if d >= time.Millisecond {
		d = d.Round(time.Millisecond)
	}
	return d.String()
}
