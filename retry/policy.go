package retry

import (
	"errors"
	"fmt"
	"time"
)

// Unlimited as a rule's MaxAttempts means the rule never runs out of attempts.
const Unlimited = -1

// DefaultBackoff is the backoff of a rule written without one: exponential
// from 1 s, doubling, capped at 1 min.
var DefaultBackoff = Exponential(time.Second, 2, time.Minute)

// Default is the built-in policy for a step called without one: 3 attempts
// with DefaultBackoff and no timeout.
var Default = Attempts(3, DefaultBackoff)

// Never is the policy of a step that is attempted once.
var Never = Attempts(1, None)

// A Policy is the retry contract of a step: a list of rules chosen by error
// type, plus limits that hold for the whole step.
//
// The zero Policy is valid: it has no rules, so every failure is final
// (reason not_covered), and no timeout or deadline.
type Policy struct {
	// Rules say how often and how fast to retry. A rule with empty On covers
	// every retryable error; a typed rule covers errors whose type chain
	// names one of its types. See Decide for how a rule is chosen.
	Rules []Rule
	// Timeout limits each attempt. An attempt that exceeds it fails with
	// error type Timeout. Zero means no limit.
	Timeout time.Duration
	// Deadline limits the whole step, from the start of its first attempt.
	// A retry that could not start before it fails the step with reason
	// deadline. Zero means no limit.
	Deadline time.Duration
	// NonRetryable lists error types that never retry, whatever the rules say.
	NonRetryable []string
}

// A Rule says how many attempts a step gets, and how long to wait between
// them, when it fails with one of the errors the rule covers.
type Rule struct {
	// On lists the error types the rule covers; empty covers every error.
	On []string
	// MaxAttempts is the total number of attempts, the first included.
	// Unlimited (-1) means no limit. Zero is treated as one.
	MaxAttempts int
	// Backoff gives the delay before each retry.
	Backoff Backoff
}

// Attempts returns a policy with one catch-all rule allowing n attempts in
// all (Unlimited for no limit) with backoff b.
func Attempts(n int, b Backoff) Policy {
	return Policy{Rules: []Rule{{MaxAttempts: n, Backoff: b}}}
}

// WithRule returns a copy of p with r appended to its rules.
func (p Policy) WithRule(r Rule) Policy {
	p.Rules = append(p.Rules[:len(p.Rules):len(p.Rules)], r)
	return p
}

// WithTimeout returns a copy of p with the per-attempt timeout d.
func (p Policy) WithTimeout(d time.Duration) Policy {
	p.Timeout = d
	return p
}

// WithDeadline returns a copy of p with the total deadline d.
func (p Policy) WithDeadline(d time.Duration) Policy {
	p.Deadline = d
	return p
}

// WithNonRetryable returns a copy of p that never retries the given types.
func (p Policy) WithNonRetryable(types ...string) Policy {
	p.NonRetryable = append(p.NonRetryable[:len(p.NonRetryable):len(p.NonRetryable)], types...)
	return p
}

// Validate reports every problem with p at once.
func (p *Policy) Validate() error {
	var errs []error
	if p.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout %v is negative", p.Timeout))
	}
	if p.Deadline < 0 {
		errs = append(errs, fmt.Errorf("deadline %v is negative", p.Deadline))
	}
	for i, t := range p.NonRetryable {
		if !validType(t) {
			errs = append(errs, fmt.Errorf("non_retryable[%d]: %q is not an error type name", i, t))
		}
	}
	for i := range p.Rules {
		if err := p.Rules[i].validate(); err != nil {
			errs = append(errs, fmt.Errorf("rule %d: %w", i+1, err))
		}
	}
	return errors.Join(errs...)
}

func (r *Rule) validate() error {
	var errs []error
	if r.MaxAttempts < Unlimited {
		errs = append(errs, fmt.Errorf("max attempts %d is out of range (use -1 for unlimited)", r.MaxAttempts))
	}
	for i, t := range r.On {
		if !validType(t) {
			errs = append(errs, fmt.Errorf("on[%d]: %q is not an error type name", i, t))
		}
	}
	if err := r.Backoff.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// attempts is the rule's limit with 0 read as 1 and Unlimited as the largest.
func (r *Rule) attempts() int {
	switch {
	case r.MaxAttempts == Unlimited:
		return int(^uint(0) >> 1)
	case r.MaxAttempts < 1:
		return 1
	}
	return r.MaxAttempts
}

// validType reports whether s can name an error type: an identifier, possibly
// dotted (pkg.Type), as written in the text form.
func validType(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case (c >= '0' && c <= '9') || c == '.':
			if i == 0 {
				return false
			}
		default:
			return false
		}
	}
	return true
}
