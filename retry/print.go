package retry

import (
	"strconv"
	"strings"
	"time"
)

// Normalize returns p with every field that cannot change a decision, or
// that has two spellings, brought to one form:
//
//   - MaxAttempts 0 becomes 1, as Decide reads it.
//   - A rule allowing one attempt never waits, so its backoff becomes None.
//   - A backoff of kind none, or with a zero Base, becomes None; fixed drops
//     Multiplier and Max, linear drops Multiplier, and exponential writes a
//     zero Multiplier as 2.
//   - A type named twice in On or NonRetryable keeps its first place.
//   - Empty lists become nil.
//
// Parse, UnmarshalJSON and the Parse* functions return normalised policies,
// and String and MarshalJSON print p.Normalize(), so a policy read back from
// its printed form equals p.Normalize(). Normalize does not modify p.
func (p Policy) Normalize() Policy {
	var rules []Rule
	for _, r := range p.Rules {
		rules = append(rules, r.normalize())
	}
	p.Rules = rules
	p.NonRetryable = dedupe(p.NonRetryable)
	return p
}

func (r Rule) normalize() Rule {
	r.On = dedupe(r.On)
	if r.MaxAttempts == 0 {
		r.MaxAttempts = 1
	}
	if r.MaxAttempts == 1 {
		r.Backoff = None
	}
	r.Backoff = r.Backoff.normalize()
	return r
}

func (b Backoff) normalize() Backoff {
	if b.Kind == BackoffNone || b.Base == 0 {
		return None
	}
	switch b.Kind {
	case BackoffFixed:
		b.Multiplier, b.Max = 0, 0
	case BackoffLinear:
		b.Multiplier = 0
	case BackoffExponential:
		if b.Multiplier == 0 {
			b.Multiplier = 2
		}
	}
	return b
}

// dedupe returns a copy of list without repeats, or nil if it is empty.
func dedupe(list []string) []string {
	var out []string
	for _, s := range list {
		if !contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// String returns p in the canonical text form: the rules in order, then one
// bracket with the policy-wide limits, all on one line, each key written only
// when it differs from what Parse assumes without it. So
//
//	[retry: 3, backoff: 60] [timeout: 2m]
//
// prints as "[retry: 3, backoff: 1m] [timeout: 2m]", a rule using
// DefaultBackoff prints without backoff keys, and Never prints as
// "[retry: 0]". Durations print as a whole number of the largest unit that
// divides them (90s, 1m, 1500ms, 1d).
//
// The zero Policy prints as "", which Parse rejects: a policy in the text
// form says something.
func (p Policy) String() string {
	p = p.Normalize()
	var sb strings.Builder
	for i := range p.Rules {
		if i > 0 {
			sb.WriteByte(' ')
		}
		p.Rules[i].write(&sb)
	}
	var limits []string
	if p.Timeout != 0 {
		limits = append(limits, "timeout: "+formatDuration(p.Timeout))
	}
	if p.Deadline != 0 {
		limits = append(limits, "deadline: "+formatDuration(p.Deadline))
	}
	if len(p.NonRetryable) > 0 {
		limits = append(limits, "non_retryable: ("+strings.Join(p.NonRetryable, ", ")+")")
	}
	if limits != nil {
		if sb.Len() > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString("[" + strings.Join(limits, ", ") + "]")
	}
	return sb.String()
}

// String returns r as a bracket of the canonical text form, such as
// "[NetworkError -> retry: 5, backoff: 2m]".
func (r Rule) String() string {
	var sb strings.Builder
	r = r.normalize()
	r.write(&sb)
	return sb.String()
}

// write prints the normalised rule r.
func (r *Rule) write(sb *strings.Builder) {
	sb.WriteByte('[')
	switch len(r.On) {
	case 0:
	case 1:
		sb.WriteString(r.On[0] + " -> ")
	default:
		sb.WriteString("(" + strings.Join(r.On, ", ") + ") -> ")
	}
	sb.WriteString("retry: ")
	if r.MaxAttempts == Unlimited {
		sb.WriteString("unlimited")
	} else {
		sb.WriteString(strconv.Itoa(r.MaxAttempts - 1))
	}
	b := r.Backoff
	switch {
	case r.MaxAttempts == 1 || b == DefaultBackoff:
	case b.Kind == BackoffNone:
		sb.WriteString(", backoff_kind: none")
	default:
		sb.WriteString(", backoff: " + formatDuration(b.Base))
		if b.Kind != BackoffExponential {
			sb.WriteString(", backoff_kind: " + b.Kind.String())
		}
		if b.Kind == BackoffExponential && b.Multiplier != 2 {
			sb.WriteString(", multiplier: " + strconv.FormatFloat(b.Multiplier, 'g', -1, 64))
		}
		if b.Max != 0 && b.Kind != BackoffFixed {
			sb.WriteString(", max_backoff: " + formatDuration(b.Max))
		}
		if b.Jitter != JitterNone {
			sb.WriteString(", jitter: " + b.Jitter.String())
		}
	}
	sb.WriteByte(']')
}

// formatDuration writes d as a whole number of the largest unit that divides
// it, in the units Parse reads: 0, 1d, 36h, 90s, 1500ms, 250us, 7ns.
func formatDuration(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	for _, u := range [...]struct {
		name string
		d    time.Duration
	}{
		{"d", 24 * time.Hour},
		{"h", time.Hour},
		{"m", time.Minute},
		{"s", time.Second},
		{"ms", time.Millisecond},
		{"us", time.Microsecond},
	} {
		if d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(d), 10) + "ns"
}
