package retry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"
)

// reprise's own JSON shape of a policy. Durations are strings of the text
// form ("1m", "100ms", "1m30s"); a bare number in a string is seconds.
//
//	{
//	  "rules": [
//	    {"on": ["NetworkError"], "max_attempts": 6,
//	     "backoff": {"kind": "exponential", "base": "1s", "multiplier": 2, "max": "1m", "jitter": "full"}}
//	  ],
//	  "timeout": "30s",
//	  "deadline": "1h",
//	  "non_retryable": ["ValidationError"]
//	}
type (
	policyJSON struct {
		Rules        []ruleJSON `json:"rules,omitempty"`
		Timeout      string     `json:"timeout,omitempty"`
		Deadline     string     `json:"deadline,omitempty"`
		NonRetryable []string   `json:"non_retryable,omitempty"`
	}
	ruleJSON struct {
		On          []string    `json:"on,omitempty"`
		MaxAttempts int         `json:"max_attempts"`
		Backoff     backoffJSON `json:"backoff"`
	}
	backoffJSON struct {
		Kind       string  `json:"kind"`
		Base       string  `json:"base,omitempty"`
		Multiplier float64 `json:"multiplier,omitempty"`
		Max        string  `json:"max,omitempty"`
		Jitter     string  `json:"jitter,omitempty"`
	}
)

// MarshalJSON writes p.Normalize() in reprise's JSON shape:
//
//	{"rules": [{"on": [...], "max_attempts": 4, "backoff": {...}}],
//	 "timeout": "30s", "deadline": "1h", "non_retryable": [...]}
//
// Every rule has max_attempts (the first attempt included, -1 for
// unlimited) and a backoff with its kind; base, multiplier, max and jitter
// are written when they apply and are set. Durations are strings as the text
// form writes them. Empty fields are left out.
func (p Policy) MarshalJSON() ([]byte, error) {
	p = p.Normalize()
	out := policyJSON{NonRetryable: p.NonRetryable}
	if p.Timeout != 0 {
		out.Timeout = formatDuration(p.Timeout)
	}
	if p.Deadline != 0 {
		out.Deadline = formatDuration(p.Deadline)
	}
	for _, r := range p.Rules {
		b := backoffJSON{Kind: r.Backoff.Kind.String(), Multiplier: r.Backoff.Multiplier}
		if r.Backoff.Kind != BackoffNone {
			b.Base = formatDuration(r.Backoff.Base)
		}
		if r.Backoff.Max != 0 {
			b.Max = formatDuration(r.Backoff.Max)
		}
		if r.Backoff.Jitter != JitterNone {
			b.Jitter = r.Backoff.Jitter.String()
		}
		out.Rules = append(out.Rules, ruleJSON{On: r.On, MaxAttempts: r.MaxAttempts, Backoff: b})
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads reprise's JSON shape (see MarshalJSON). A rule needs
// max_attempts (at least 1, or -1); without backoff it uses DefaultBackoff.
// In a backoff, kind defaults to exponential, base is required unless the
// kind is none, multiplier defaults to 2 and applies to exponential only, max
// to linear and exponential only. Unknown fields are errors naming the field.
// The policy read is validated and normalised; on error p is left as it was.
func (p *Policy) UnmarshalJSON(data []byte) error {
	pol, err := unmarshalPolicy(data)
	if err != nil {
		return err
	}
	*p = pol
	return nil
}

func unmarshalPolicy(data []byte) (Policy, error) {
	var (
		pol       Policy
		rules     []json.RawMessage
		timeout   *string
		deadline  *string
		nonRetryN []string
	)
	err := decodeObject(data, "policy", fields{
		"rules":         &rules,
		"timeout":       &timeout,
		"deadline":      &deadline,
		"non_retryable": &nonRetryN,
	})
	if err != nil {
		return Policy{}, err
	}
	if pol.Timeout, err = jsonDuration("timeout", timeout); err != nil {
		return Policy{}, err
	}
	if pol.Deadline, err = jsonDuration("deadline", deadline); err != nil {
		return Policy{}, err
	}
	pol.NonRetryable = nonRetryN
	for i, raw := range rules {
		r, err := unmarshalRule(raw, fmt.Sprintf("rules[%d]", i))
		if err != nil {
			return Policy{}, err
		}
		pol.Rules = append(pol.Rules, r)
	}
	return validated(pol)
}

func unmarshalRule(data []byte, where string) (Rule, error) {
	var (
		on          []string
		maxAttempts *int
		backoff     json.RawMessage
	)
	err := decodeObject(data, where, fields{
		"on":           &on,
		"max_attempts": &maxAttempts,
		"backoff":      &backoff,
	})
	if err != nil {
		return Rule{}, err
	}
	r := Rule{On: on, Backoff: DefaultBackoff}
	switch {
	case maxAttempts == nil:
		return Rule{}, fmt.Errorf("%s: max_attempts is missing (the number of attempts, the first included, or -1 for unlimited)", where)
	case *maxAttempts == 0 || *maxAttempts < Unlimited:
		return Rule{}, fmt.Errorf("%s.max_attempts: %d is out of range (want at least 1, or -1 for unlimited)", where, *maxAttempts)
	}
	r.MaxAttempts = *maxAttempts
	if backoff != nil {
		if r.Backoff, err = unmarshalBackoff(backoff, where+".backoff"); err != nil {
			return Rule{}, err
		}
	}
	return r, nil
}

func unmarshalBackoff(data []byte, where string) (Backoff, error) {
	var (
		kind, base, maxB, jitter *string
		mult                     *float64
	)
	err := decodeObject(data, where, fields{
		"kind":       &kind,
		"base":       &base,
		"multiplier": &mult,
		"max":        &maxB,
		"jitter":     &jitter,
	})
	if err != nil {
		return Backoff{}, err
	}
	b := Backoff{Kind: BackoffExponential}
	if kind != nil {
		if b.Kind, err = ParseBackoffKind(*kind); err != nil {
			return Backoff{}, fmt.Errorf("%s.kind: %w", where, err)
		}
	}
	if base == nil && b.Kind != BackoffNone {
		return Backoff{}, fmt.Errorf("%s: base is missing (the first delay of a %s backoff)", where, b.Kind)
	}
	set := map[string]bool{"base": base != nil, "multiplier": mult != nil, "max": maxB != nil, "jitter": jitter != nil}
	for _, f := range []string{"base", "multiplier", "max", "jitter"} {
		if set[f] && !appliesJSON(f, b.Kind) {
			return Backoff{}, fmt.Errorf("%s.%s: does not apply to kind %s", where, f, b.Kind)
		}
	}
	if b.Base, err = jsonDuration(where+".base", base); err != nil {
		return Backoff{}, err
	}
	if b.Max, err = jsonDuration(where+".max", maxB); err != nil {
		return Backoff{}, err
	}
	if mult != nil {
		if !(*mult >= 1) {
			return Backoff{}, fmt.Errorf("%s.multiplier: %v is out of range (want a number ≥ 1)", where, *mult)
		}
		b.Multiplier = *mult
	}
	if jitter != nil {
		if b.Jitter, err = ParseJitter(*jitter); err != nil {
			return Backoff{}, fmt.Errorf("%s.jitter: %w", where, err)
		}
	}
	return b, nil
}

func appliesJSON(field string, kind BackoffKind) bool {
	switch field {
	case "multiplier":
		return applies(keyMultiplier, kind)
	case "max":
		return applies(keyMaxBackoff, kind)
	}
	return applies(keyBackoff, kind)
}

// ParseWorkConfig reads a work_config, Argyll's shape:
//
//	{"max_retries": 3, "backoff": 500, "max_backoff": 30000, "backoff_type": "exponential"}
//
// max_retries is required: N retries (N+1 attempts), 0 for none, -1 for
// unlimited. backoff and max_backoff are milliseconds, max_backoff 0 meaning
// no cap. backoff_type is fixed, linear or exponential, exponential when left
// out, as a bare backoff is in the text form. Without backoff the rule uses
// DefaultBackoff with the given type and cap. As Argyll does, a max_backoff
// is accepted with a fixed backoff, and ignored. The object may also be
// wrapped as {"work_config": {...}}.
func ParseWorkConfig(data []byte) (Policy, error) {
	data, err := unwrap(data, "work_config")
	if err != nil {
		return Policy{}, err
	}
	var (
		retries       *int
		backoff, maxB *float64
		backoffType   *string
	)
	err = decodeObject(data, "work_config", fields{
		"max_retries":  &retries,
		"backoff":      &backoff,
		"max_backoff":  &maxB,
		"backoff_type": &backoffType,
	})
	if err != nil {
		return Policy{}, err
	}
	if retries == nil {
		return Policy{}, errors.New("work_config: max_retries is missing (0 for no retries, -1 for unlimited)")
	}
	r := Rule{MaxAttempts: Unlimited, Backoff: DefaultBackoff}
	switch n := *retries; {
	case n < Unlimited:
		return Policy{}, fmt.Errorf("work_config.max_retries: %d is out of range (want at least 0, or -1 for unlimited)", n)
	case n == math.MaxInt:
		return Policy{}, fmt.Errorf("work_config.max_retries: %d is out of range (use -1 for unlimited)", n)
	case n >= 0:
		r.MaxAttempts = n + 1
	}
	if backoff != nil {
		if r.Backoff.Base, err = millis("work_config.backoff", *backoff); err != nil {
			return Policy{}, err
		}
		r.Backoff.Multiplier, r.Backoff.Max = 2, 0
	}
	if maxB != nil {
		if r.Backoff.Max, err = millis("work_config.max_backoff", *maxB); err != nil {
			return Policy{}, err
		}
	}
	if backoffType != nil {
		k, err := ParseBackoffKind(*backoffType)
		if err != nil || k == BackoffNone {
			return Policy{}, fmt.Errorf("work_config.backoff_type: unknown type %q (want fixed, linear or exponential)", *backoffType)
		}
		r.Backoff.Kind = k
	}
	return validated(Policy{Rules: []Rule{r}})
}

// millis converts a number of milliseconds to a duration.
func millis(where string, ms float64) (time.Duration, error) {
	switch {
	case ms < 0:
		return 0, fmt.Errorf("%s: negative number %v (want milliseconds ≥ 0)", where, ms)
	case !(ms*float64(time.Millisecond) < math.MaxInt64):
		return 0, fmt.Errorf("%s: %v milliseconds is out of range", where, ms)
	}
	return time.Duration(math.Round(ms * float64(time.Millisecond))), nil
}

// The Temporal field names, snake_case as in its SDKs' docs; ParseTemporal
// also reads the camelCase of Temporal's own JSON.
var temporalFields = []string{
	"initial_interval", "backoff_coefficient", "maximum_interval", "maximum_attempts", "non_retryable_error_types",
}

// ParseTemporal reads a Temporal retry policy:
//
//	{"initial_interval": "1s", "backoff_coefficient": 2, "maximum_interval": "100s",
//	 "maximum_attempts": 5, "non_retryable_error_types": ["ValidationError"]}
//
// Field names may also be camelCase (initialInterval, …), as in Temporal's
// own JSON, and the object may be wrapped as {"retry_policy": {...}}.
// Durations are strings such as "1s" or "1.5s". As in Temporal, every field
// is optional: initial_interval defaults to 1s, backoff_coefficient to 2
// (at least 1), maximum_interval to 100 × initial_interval (not below it),
// and maximum_attempts to 0, which means unlimited. The backoff is
// exponential; non_retryable_error_types become NonRetryable.
func ParseTemporal(data []byte) (Policy, error) {
	data, err := unwrap(data, "retry_policy", "retryPolicy")
	if err != nil {
		return Policy{}, err
	}
	var (
		initial, maxInterval *string
		coeff                *float64
		attempts             *int
		nonRetryable         []string
	)
	targets := []any{&initial, &coeff, &maxInterval, &attempts, &nonRetryable}
	fs := fields{}
	for i, name := range temporalFields {
		fs[name] = targets[i]
		fs[camelCase(name)] = targets[i]
	}
	if err := decodeObject(data, "retry policy", fs); err != nil {
		return Policy{}, err
	}
	// Temporal reads a zero as "the default", and so does ParseTemporal.
	b := Backoff{Kind: BackoffExponential, Base: time.Second, Multiplier: 2}
	if d, err := jsonDuration("initial_interval", initial); err != nil {
		return Policy{}, err
	} else if d > 0 {
		b.Base = d
	}
	if coeff != nil && *coeff != 0 {
		if !(*coeff >= 1) || math.IsInf(*coeff, 0) {
			return Policy{}, fmt.Errorf("backoff_coefficient: %v is out of range (want a number ≥ 1)", *coeff)
		}
		b.Multiplier = *coeff
	}
	b.Max = maxDelay
	if b.Base <= maxDelay/100 {
		b.Max = b.Base * 100
	}
	if d, err := jsonDuration("maximum_interval", maxInterval); err != nil {
		return Policy{}, err
	} else if d > 0 {
		if d < b.Base {
			return Policy{}, fmt.Errorf("maximum_interval %s is below initial_interval %s", formatDuration(d), formatDuration(b.Base))
		}
		b.Max = d
	}
	r := Rule{MaxAttempts: Unlimited, Backoff: b}
	if attempts != nil {
		switch n := *attempts; {
		case n < 0:
			return Policy{}, fmt.Errorf("maximum_attempts: negative number %d (want at least 1, or 0 for unlimited)", n)
		case n > 0:
			r.MaxAttempts = n
		}
	}
	return validated(Policy{Rules: []Rule{r}, NonRetryable: nonRetryable})
}

// camelCase turns snake_case into camelCase.
func camelCase(s string) string {
	parts := strings.Split(s, "_")
	for i := 1; i < len(parts); i++ {
		parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
	}
	return strings.Join(parts, "")
}

// shapeOf names the JSON shape that has a field named field, or "".
func shapeOf(field string) string {
	switch field {
	case "rules", "timeout", "deadline", "non_retryable":
		return "reprise"
	case "max_retries", "backoff", "max_backoff", "backoff_type", "work_config":
		return "work_config"
	case "retry_policy", "retryPolicy":
		return "Temporal"
	}
	for _, f := range temporalFields {
		if field == f || field == camelCase(f) {
			return "Temporal"
		}
	}
	return ""
}

// ParseAny reads a policy in any shape reprise accepts: the text form, or a
// JSON object in reprise's shape (see MarshalJSON), a work_config (see
// ParseWorkConfig) or a Temporal retry policy (see ParseTemporal). Input whose
// first non-blank character is { is JSON, whose shape is told by its field
// names; anything else, such as [retry: 3], is the text form. Empty input, an
// empty JSON object and a JSON policy without rules or limits are errors: a
// policy says something.
func ParseAny(s string) (Policy, error) {
	if !strings.HasPrefix(strings.TrimLeft(s, " \t\r\n"), "{") {
		return Parse(s)
	}
	data := []byte(s)
	keys, err := objectKeys(data, "policy")
	if err != nil {
		return Policy{}, err
	}
	var shapes, examples []string // each shape found, and its first field
	for _, k := range keys {
		if shape := shapeOf(k); shape != "" && !slices.Contains(shapes, shape) {
			shapes = append(shapes, shape)
			examples = append(examples, fmt.Sprintf("%s (%s)", k, shape))
		}
	}
	switch {
	case len(shapes) > 1:
		return Policy{}, fmt.Errorf("policy: mixes the fields of different shapes, %s: want one shape", strings.Join(examples, " and "))
	case len(shapes) == 0 && len(keys) == 0:
		return Policy{}, errors.New("policy: empty JSON object: " + shapesWant)
	case len(shapes) == 0:
		return Policy{}, fmt.Errorf("policy: unknown field %q: %s", keys[0], shapesWant)
	case shapes[0] == "work_config":
		return ParseWorkConfig(data)
	case shapes[0] == "Temporal":
		return ParseTemporal(data)
	}
	p, err := unmarshalPolicy(data)
	if err == nil && p.String() == "" {
		return Policy{}, errors.New("policy: no rules and no limits: a policy says something, such as {\"rules\": [{\"max_attempts\": 3}]}")
	}
	return p, err
}

const shapesWant = "want reprise's shape (rules, timeout, deadline, non_retryable), " +
	"a work_config (max_retries, backoff, max_backoff, backoff_type) or a Temporal retry policy " +
	"(initial_interval, backoff_coefficient, maximum_interval, maximum_attempts, non_retryable_error_types)"

// validated returns p normalised if it is valid.
func validated(p Policy) (Policy, error) {
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	return p.Normalize(), nil
}

// fields maps the names of a JSON object's fields to where they decode.
type fields map[string]any

// decodeObject decodes the JSON object data into fs, rejecting fields fs does
// not name. where names the object in errors, such as rules[0].backoff.
func decodeObject(data []byte, where string, fs fields) error {
	var raw map[string]json.RawMessage
	if err := decodeJSON(data, &raw); err != nil {
		return fmt.Errorf("%s: %w", where, jsonError(err, "an object"))
	}
	if raw == nil {
		return fmt.Errorf("%s: found null, want an object", where)
	}
	for _, k := range sortedKeys(raw) {
		dst, ok := fs[k]
		if !ok {
			known := sortedKeys(fs)
			return fmt.Errorf("%s: unknown field %q (want %s)", where, k, strings.Join(known, ", "))
		}
		if string(raw[k]) == "null" {
			continue // as if it were left out
		}
		if err := decodeJSON(raw[k], dst); err != nil {
			return fmt.Errorf("%s.%s: %w", where, k, jsonError(err, describeType(reflect.TypeOf(dst).Elem())))
		}
	}
	return nil
}

// unwrap returns the value of data's only field when that field is one of
// names, and data itself otherwise.
func unwrap(data []byte, names ...string) ([]byte, error) {
	keys, err := objectKeys(data, names[0])
	if err != nil || len(keys) != 1 || !slices.Contains(names, keys[0]) {
		return data, err
	}
	var inner json.RawMessage
	err = decodeObject(data, "policy", fields{keys[0]: &inner})
	return inner, err
}

// objectKeys returns the field names of the JSON object data, sorted.
func objectKeys(data []byte, where string) ([]string, error) {
	var raw map[string]json.RawMessage
	if err := decodeJSON(data, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", where, jsonError(err, "an object"))
	}
	return sortedKeys(raw), nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// decodeJSON decodes exactly one JSON value from data into v.
func decodeJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more data after the JSON value")
	}
	return nil
}

// jsonError rewrites encoding/json's type errors in the words of a policy.
func jsonError(err error, want string) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("found %s, want %s", te.Value, want)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("invalid JSON at byte %d: %w", se.Offset, err)
	}
	return err
}

func describeType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int:
		return "a whole number"
	case reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.String {
			return "a list of strings"
		}
		return "a list"
	}
	return "an object"
}

// jsonDuration reads an optional duration string of the text form.
func jsonDuration(where string, s *string) (time.Duration, error) {
	if s == nil {
		return 0, nil
	}
	d, err := parseDuration(*s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", where, err)
	}
	return d, nil
}
