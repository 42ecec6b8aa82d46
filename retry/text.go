package retry

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// A SyntaxError reports where a policy in the text form is wrong and why.
type SyntaxError struct {
	// Line and Column locate the offending token, both from 1. Column
	// counts characters, not bytes.
	Line, Column int
	// Msg says what was found and what was expected.
	Msg string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Msg)
}

// Parse reads a policy in the text form:
//
//	[retry: 3, backoff: 1s] [Timeout -> retry: 0] [timeout: 30s, deadline: 1h]
//
// A bracket holding retry is a rule, optionally limited to some error types
// by a filter ("NetworkError ->" or "(A, B) ->"). Its other keys are backoff,
// backoff_kind (none, fixed, linear, exponential), multiplier, max_backoff and
// jitter (none, full, equal). retry: N allows N retries, so N+1 attempts;
// retry: unlimited (or -1) never runs out. A rule without backoff uses
// DefaultBackoff; a rule with backoff is exponential, doubling, uncapped,
// unless its other keys say otherwise.
//
// The brackets without retry and without a filter hold the policy-wide keys
// timeout, deadline and non_retryable: (A, B), each at most once per policy.
//
// A duration is a bare number of seconds (60, 0.5) or numbers with units ns,
// us, ms, s, m, h and d, as in 100ms, 1m30s or 1d. A # starts a comment that
// runs to the end of the line; line breaks and comments may stand between any
// two tokens.
//
// Parse returns a normalised policy (see Policy.Normalize), so that
// Parse(p.String()) equals p for every policy Parse returns. Every error is a
// *SyntaxError pointing at the offending token.
func Parse(s string) (Policy, error) {
	toks, err := lex(s)
	if err != nil {
		return Policy{}, err
	}
	p := parser{src: s, toks: toks}
	pol, err := p.policy()
	if err != nil {
		return Policy{}, err
	}
	return pol.Normalize(), nil
}

// The keys of the text form. The rule keys come first.
const (
	keyRetry = iota
	keyBackoff
	keyBackoffKind
	keyMultiplier
	keyMaxBackoff
	keyJitter
	keyTimeout
	keyDeadline
	keyNonRetryable
	numKeys

	firstPolicyKey = keyTimeout
)

var keyNames = [numKeys]string{
	"retry", "backoff", "backoff_kind", "multiplier", "max_backoff", "jitter",
	"timeout", "deadline", "non_retryable",
}

const (
	ruleKeyList   = "retry, backoff, backoff_kind, multiplier, max_backoff or jitter"
	policyKeyList = "timeout, deadline or non_retryable"
)

func lookupKey(s string) int {
	for k, name := range keyNames {
		if name == s {
			return k
		}
	}
	return -1
}

type tokenKind uint8

const (
	tokEOF tokenKind = iota
	tokOpen
	tokClose
	tokLParen
	tokRParen
	tokComma
	tokColon
	tokArrow
	tokWord
)

type token struct {
	kind tokenKind
	text string
	pos  int // byte offset in the input
}

// describe names a token in an error message.
func (t token) describe() string {
	switch t.kind {
	case tokEOF:
		return "end of input"
	case tokWord:
		return strconv.Quote(t.text)
	}
	return "'" + t.text + "'"
}

// lex splits s into tokens. Words are runs of letters, digits and _ . + - µ
// (a - that starts -> ends the word): names, numbers and durations alike.
func lex(s string) ([]token, error) {
	var toks []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '-' && i+1 < len(s) && s[i+1] == '>':
			toks = append(toks, token{tokArrow, "->", i})
			i += 2
		case punct(c) != tokEOF:
			toks = append(toks, token{punct(c), s[i : i+1], i})
			i++
		default:
			j := i
			for j < len(s) {
				if n := wordRune(s[j:]); n > 0 && !strings.HasPrefix(s[j:], "->") {
					j += n
					continue
				}
				break
			}
			if j == i {
				r, _ := utf8.DecodeRuneInString(s[i:])
				what := strconv.QuoteRune(r)
				if r == utf8.RuneError {
					what = fmt.Sprintf("byte %#x", s[i])
				}
				return nil, syntaxErrorAt(s, i, "unexpected character %s", what)
			}
			toks = append(toks, token{tokWord, s[i:j], i})
			i = j
		}
	}
	return append(toks, token{tokEOF, "", len(s)}), nil
}

// punct returns the kind of a one-byte token, or tokEOF for other bytes.
func punct(c byte) tokenKind {
	switch c {
	case '[':
		return tokOpen
	case ']':
		return tokClose
	case '(':
		return tokLParen
	case ')':
		return tokRParen
	case ',':
		return tokComma
	case ':':
		return tokColon
	}
	return tokEOF
}

// wordRune returns the byte length of the word character that starts s, or 0.
func wordRune(s string) int {
	c := s[0]
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
		c == '_', c == '.', c == '+', c == '-':
		return 1
	case strings.HasPrefix(s, "µ"):
		return len("µ")
	case strings.HasPrefix(s, "μ"):
		return len("μ")
	}
	return 0
}

func syntaxErrorAt(src string, pos int, format string, args ...any) *SyntaxError {
	line, col := 1, 1
	for _, r := range src[:pos] {
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return &SyntaxError{Line: line, Column: col, Msg: fmt.Sprintf(format, args...)}
}

type parser struct {
	src  string
	toks []token
	i    int
}

func (p *parser) peek() token { return p.toks[p.i] }

func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tokEOF {
		p.i++
	}
	return t
}

func (p *parser) errorf(t token, format string, args ...any) *SyntaxError {
	return syntaxErrorAt(p.src, t.pos, format, args...)
}

// where names the place of t in a message.
func (p *parser) where(t token) string {
	e := syntaxErrorAt(p.src, t.pos, "")
	return fmt.Sprintf("line %d, column %d", e.Line, e.Column)
}

// expect consumes a token of kind k, or fails saying what it wanted.
func (p *parser) expect(k tokenKind, want string) (token, error) {
	t := p.next()
	if t.kind != k {
		return t, p.errorf(t, "found %s, want %s", t.describe(), want)
	}
	return t, nil
}

// A bracket is one [...] of the text form as written, before it is read as a
// rule or as policy-wide limits.
type bracket struct {
	filter  []string
	filterT token // the filter's first token, if any
	keys    [numKeys]*token
	retry   int
	backoff time.Duration
	kind    BackoffKind
	mult    float64
	maxB    time.Duration
	jitter  Jitter
	timeout time.Duration
	dead    time.Duration
	nonRetr []string
}

func (p *parser) policy() (Policy, error) {
	var pol Policy
	var seen [numKeys]*token // policy-wide keys already given
	if t := p.peek(); t.kind == tokEOF {
		return pol, p.errorf(t, "empty policy: want a bracket such as [retry: 3]")
	}
	for p.peek().kind != tokEOF {
		if _, err := p.expect(tokOpen, "'[' to start a bracket"); err != nil {
			return pol, err
		}
		b, err := p.bracket()
		if err != nil {
			return pol, err
		}
		if b.keys[keyRetry] != nil {
			r, err := p.rule(&b)
			if err != nil {
				return pol, err
			}
			pol.Rules = append(pol.Rules, r)
			continue
		}
		if err := p.limits(&b, &pol, &seen); err != nil {
			return pol, err
		}
	}
	return pol, nil
}

// bracket reads the inside of a bracket, after its '[', through its ']'.
func (p *parser) bracket() (bracket, error) {
	var b bracket
	first := p.peek()
	if first.kind == tokClose {
		return b, p.errorf(first, "empty bracket: want a key such as retry: 3")
	}
	if first.kind == tokLParen || first.kind == tokWord && p.toks[p.i+1].kind == tokArrow {
		types, err := p.typeList("a type filter")
		if err != nil {
			return b, err
		}
		if _, err := p.expect(tokArrow, "'->' after a type filter"); err != nil {
			return b, err
		}
		b.filter, b.filterT = types, first
	}
	for {
		if err := p.entry(&b); err != nil {
			return b, err
		}
		t := p.next()
		switch t.kind {
		case tokClose:
			return b, nil
		case tokComma:
			continue
		}
		return b, p.errorf(t, "found %s, want ',' or ']'", t.describe())
	}
}

// entry reads one key: value pair into b.
func (p *parser) entry(b *bracket) error {
	t := p.next()
	if t.kind != tokWord {
		return p.errorf(t, "found %s, want a key such as retry", t.describe())
	}
	k := lookupKey(t.text)
	if k < 0 {
		msg := fmt.Sprintf("unknown key %s", t.describe())
		if p.peek().kind != tokColon {
			msg += " (want a key, or a type filter written Type -> retry: N)"
		} else if s := suggestKey(t.text); s != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", s)
		} else {
			msg += " (want " + ruleKeyList + " in a rule; " + policyKeyList + " in a bracket of their own)"
		}
		return p.errorf(t, "%s", msg)
	}
	if prev := b.keys[k]; prev != nil {
		return p.errorf(t, "duplicate key %s in one bracket (first at %s)", t.text, p.where(*prev))
	}
	b.keys[k] = &t
	if _, err := p.expect(tokColon, "':' after "+t.text); err != nil {
		return err
	}
	if k == keyNonRetryable {
		types, err := p.typeList("a list of error types")
		b.nonRetr = types
		return err
	}
	v := p.next()
	if v.kind != tokWord {
		return p.errorf(v, "found %s, want a value for %s", v.describe(), t.text)
	}
	var err error
	switch k {
	case keyRetry:
		b.retry, err = parseRetries(v.text)
	case keyBackoff:
		b.backoff, err = parseDuration(v.text)
	case keyBackoffKind:
		b.kind, err = ParseBackoffKind(v.text)
	case keyMultiplier:
		b.mult, err = parseMultiplier(v.text)
	case keyMaxBackoff:
		b.maxB, err = parseDuration(v.text)
	case keyJitter:
		b.jitter, err = ParseJitter(v.text)
	case keyTimeout:
		b.timeout, err = parsePositiveDuration(v.text, t.text)
	case keyDeadline:
		b.dead, err = parsePositiveDuration(v.text, t.text)
	}
	if err != nil {
		return p.errorf(v, "%s: %v", t.text, err)
	}
	return nil
}

// typeList reads an error type name, or a parenthesised list of them.
func (p *parser) typeList(what string) ([]string, error) {
	if p.peek().kind != tokLParen {
		t, err := p.typeName(what)
		return []string{t}, err
	}
	open := p.next()
	if p.peek().kind == tokRParen {
		return nil, p.errorf(p.peek(), "empty list: want %s inside ( )", what)
	}
	var types []string
	for {
		t := p.peek()
		name, err := p.typeName(what)
		if err != nil {
			return nil, err
		}
		if contains(types, name) {
			return nil, p.errorf(t, "%s given twice in one list", name)
		}
		types = append(types, name)
		t = p.next()
		switch t.kind {
		case tokRParen:
			return types, nil
		case tokComma:
			continue
		case tokEOF:
			return nil, p.errorf(t, "found end of input, want ')' to close the '(' at %s", p.where(open))
		}
		return nil, p.errorf(t, "found %s, want ',' or ')'", t.describe())
	}
}

func (p *parser) typeName(what string) (string, error) {
	t := p.next()
	if t.kind != tokWord || !validType(t.text) {
		return "", p.errorf(t, "found %s, want an error type name in %s", t.describe(), what)
	}
	return t.text, nil
}

// rule turns a bracket holding retry into a Rule.
func (p *parser) rule(b *bracket) (Rule, error) {
	for k := firstPolicyKey; k < numKeys; k++ {
		if t := b.keys[k]; t != nil {
			return Rule{}, p.errorf(*t, "%s is policy-wide and cannot stand in a rule: put it in a bracket of its own, such as [%s: ...]", t.text, t.text)
		}
	}
	r := Rule{On: b.filter, MaxAttempts: Unlimited}
	if b.retry != Unlimited {
		r.MaxAttempts = b.retry + 1
	}
	bo := DefaultBackoff
	if b.keys[keyBackoff] != nil {
		bo = Exponential(b.backoff, 2, 0)
	}
	if b.keys[keyBackoffKind] != nil {
		bo.Kind = b.kind
	}
	// A key that cannot change a delay of the chosen kind is a mistake.
	for _, k := range [...]int{keyBackoff, keyMultiplier, keyMaxBackoff, keyJitter} {
		t := b.keys[k]
		if t == nil || applies(k, bo.Kind) {
			continue
		}
		return Rule{}, p.errorf(*t, "%s does not apply to backoff_kind %s", t.text, bo.Kind)
	}
	if b.keys[keyMultiplier] != nil {
		bo.Multiplier = b.mult
	}
	if b.keys[keyMaxBackoff] != nil {
		bo.Max = b.maxB
	}
	if b.keys[keyJitter] != nil {
		bo.Jitter = b.jitter
	}
	r.Backoff = bo
	return r, nil
}

// applies reports whether rule key k has a meaning for backoffs of kind.
func applies(k int, kind BackoffKind) bool {
	switch k {
	case keyMultiplier:
		return kind == BackoffExponential
	case keyMaxBackoff:
		return kind == BackoffLinear || kind == BackoffExponential
	}
	return kind != BackoffNone
}

// limits adds a bracket without retry to the policy-wide limits.
func (p *parser) limits(b *bracket, pol *Policy, seen *[numKeys]*token) error {
	if b.filter != nil {
		return p.errorf(b.filterT, "type filter on a bracket without retry: a filter chooses the errors of a rule, so add retry: N")
	}
	for k := range firstPolicyKey {
		if t := b.keys[k]; t != nil {
			return p.errorf(*t, "%s outside a rule: add retry: N to this bracket", t.text)
		}
	}
	for k := firstPolicyKey; k < numKeys; k++ {
		t := b.keys[k]
		if t == nil {
			continue
		}
		if prev := seen[k]; prev != nil {
			return p.errorf(*t, "%s given twice (first at %s): each policy-wide key may appear once", t.text, p.where(*prev))
		}
		seen[k] = t
	}
	if b.keys[keyTimeout] != nil {
		pol.Timeout = b.timeout
	}
	if b.keys[keyDeadline] != nil {
		pol.Deadline = b.dead
	}
	if b.keys[keyNonRetryable] != nil {
		pol.NonRetryable = b.nonRetr
	}
	return nil
}

// suggestKey returns the key s was probably meant to be, or "".
func suggestKey(s string) string {
	best, bestD := "", 3
	for _, k := range keyNames {
		if d := editDistance(strings.ToLower(s), k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// parseRetries reads the value of retry: a count of retries, or unlimited
// (also -1). It returns the count, or Unlimited.
func parseRetries(s string) (int, error) {
	if s == "unlimited" || s == "-1" {
		return Unlimited, nil
	}
	n, err := strconv.Atoi(s)
	switch {
	case err != nil && isIntSyntax(s):
		return 0, fmt.Errorf("%s is out of range", s)
	case err != nil:
		return 0, fmt.Errorf("found %q, want a whole number of retries or unlimited", s)
	case n < 0:
		return 0, fmt.Errorf("negative number %d: want a number of retries ≥ 0, or unlimited (-1)", n)
	case n == math.MaxInt:
		return 0, fmt.Errorf("%d is out of range (use unlimited)", n)
	}
	return n, nil
}

// isIntSyntax reports whether s is an optionally signed run of digits.
func isIntSyntax(s string) bool {
	s = strings.TrimLeft(s, "+-")
	return s != "" && strings.Trim(s, "0123456789") == ""
}

func parseMultiplier(s string) (float64, error) {
	m, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("found %q, want a number ≥ 1", s)
	}
	switch {
	case m < 0:
		return 0, fmt.Errorf("negative number %s: want a number ≥ 1", s)
	case !(m >= 1) || math.IsInf(m, 0):
		return 0, fmt.Errorf("%s is out of range: want a finite number ≥ 1", s)
	}
	return m, nil
}

func parsePositiveDuration(s, key string) (time.Duration, error) {
	d, err := parseDuration(s)
	if err == nil && d == 0 {
		err = fmt.Errorf("found %s, want a positive duration (for no %s, leave the key out)", s, key)
	}
	return d, err
}

var durationUnits = []struct {
	name string
	d    time.Duration
}{
	// Longer names first, so that "ms" is not read as "m".
	{"ns", time.Nanosecond},
	{"us", time.Microsecond},
	{"µs", time.Microsecond},
	{"μs", time.Microsecond},
	{"ms", time.Millisecond},
	{"s", time.Second},
	{"m", time.Minute},
	{"h", time.Hour},
	{"d", 24 * time.Hour},
}

const durationWant = "want a duration such as 60 (seconds), 500ms, 30s, 2m, 1h, 1d or 1m30s"

// parseDuration reads a duration of the text form: a bare number of seconds,
// or one or more numbers each followed by a unit (ns, us, ms, s, m, h, d).
func parseDuration(s string) (time.Duration, error) {
	if strings.HasPrefix(s, "-") {
		return 0, fmt.Errorf("negative duration %s: %s", s, durationWant)
	}
	rest := s
	var total time.Duration
	for first := true; first || rest != ""; first = false {
		whole, frac, scale, n, ok := leadingNumber(rest)
		if !ok {
			return 0, fmt.Errorf("found %q, %s", s, durationWant)
		}
		rest = rest[n:]
		unit := time.Second
		if first && rest == "" {
			// A bare number: seconds.
		} else {
			unit = 0
			for _, u := range durationUnits {
				if strings.HasPrefix(rest, u.name) {
					unit, rest = u.d, rest[len(u.name):]
					break
				}
			}
			if unit == 0 {
				return 0, fmt.Errorf("found %q, %s", s, durationWant)
			}
		}
		if whole > uint64(math.MaxInt64/int64(unit)) {
			return 0, fmt.Errorf("%s is out of range (at most %s)", s, formatDuration(math.MaxInt64))
		}
		d := time.Duration(whole) * unit
		d += time.Duration(float64(frac) * (float64(unit) / scale))
		total += d
		if d < 0 || total < 0 {
			return 0, fmt.Errorf("%s is out of range (at most %s)", s, formatDuration(math.MaxInt64))
		}
	}
	return total, nil
}

// leadingNumber reads digits, optionally with a fraction, from the start of s:
// the whole part, the fraction's digits and its scale (10^digits), and the
// number of bytes read. Fraction digits past 18 are dropped.
func leadingNumber(s string) (whole, frac uint64, scale float64, n int, ok bool) {
	scale = 1
	digits := 0
	for ; n < len(s) && s[n] >= '0' && s[n] <= '9'; n++ {
		digits++
		if whole > (math.MaxUint64-9)/10 {
			whole = math.MaxUint64 // out of range, reported by the caller
			continue
		}
		whole = whole*10 + uint64(s[n]-'0')
	}
	if n < len(s) && s[n] == '.' {
		n++
		for ; n < len(s) && s[n] >= '0' && s[n] <= '9'; n++ {
			digits++
			if scale < 1e18 {
				frac = frac*10 + uint64(s[n]-'0')
				scale *= 10
			}
		}
	}
	return whole, frac, scale, n, digits > 0
}
