package retry

import "time"

// Reason says why a step stopped retrying.
type Reason string

const (
	// ReasonExhausted: the chosen rule allowed no more attempts.
	ReasonExhausted Reason = "exhausted"
	// ReasonPermanent: the error was marked permanent or its type is non-retryable.
	ReasonPermanent Reason = "permanent"
	// ReasonNotCovered: no rule covers the error's types.
	ReasonNotCovered Reason = "not_covered"
	// ReasonDeadline: the next retry could not start before the step's deadline.
	ReasonDeadline Reason = "deadline"
)

// A Failure describes a failed attempt to Decide.
type Failure struct {
	// Attempt is the number of the attempt that failed, from 1.
	Attempt int
	// Types is the error's type chain, outermost first (see TypeChain).
	Types []string
	// Permanent marks an error that must never be retried.
	Permanent bool
	// RetryAfter is the error's own minimum delay hint, or zero.
	RetryAfter time.Duration
	// Elapsed is the time from the start of the step's first attempt to now.
	Elapsed time.Duration
	// Key seeds the jitter: the step's idempotency key.
	Key string
}

// A Decision is what a policy says to do after a failed attempt.
type Decision struct {
	// Retry is true when another attempt should start after Delay.
	Retry bool
	// Delay is the wait before the next attempt, jitter included.
	Delay time.Duration
	// Rule is the index in Policy.Rules of the rule that decided, or -1.
	Rule int
	// Reason says why the step stops when Retry is false.
	Reason Reason
}

// Decide applies p to a failed attempt. The steps, in order:
//
//  1. A permanent error, or one with a type in NonRetryable, stops the step.
//  2. The rules that match are those with empty On and those whose On names
//     a type of the error. If none match, the error is not covered.
//  3. If a typed rule matches, the matching typed rule with the most attempts
//     decides; otherwise the catch-all with the most. Ties go to the first.
//  4. The step retries while the attempt number is below the rule's limit.
//  5. The delay is the rule's backoff, raised to the error's RetryAfter hint,
//     then jittered (jitter never goes below the hint).
//  6. With a Deadline, a retry that would start after it stops the step.
//
// Decide does not allocate.
func (p *Policy) Decide(f *Failure) Decision {
	if f.Permanent || anyIn(f.Types, p.NonRetryable) {
		return Decision{Rule: -1, Reason: ReasonPermanent}
	}
	rule := p.choose(f.Types)
	if rule < 0 {
		return Decision{Rule: -1, Reason: ReasonNotCovered}
	}
	r := &p.Rules[rule]
	if f.Attempt >= r.attempts() {
		return Decision{Rule: rule, Reason: ReasonExhausted}
	}
	d := max(r.Backoff.Delay(f.Attempt), f.RetryAfter)
	d = max(r.Backoff.jitter(d, f.Key, f.Attempt), f.RetryAfter)
	d = min(d, maxDelay)
	// Elapsed+d > Deadline, written so that it cannot overflow.
	if p.Deadline > 0 && (f.Elapsed > p.Deadline || d > p.Deadline-max(f.Elapsed, 0)) {
		return Decision{Rule: rule, Delay: d, Reason: ReasonDeadline}
	}
	return Decision{Retry: true, Delay: d, Rule: rule}
}

// choose returns the index of the rule that decides for an error with the
// given type chain, or -1 when no rule covers it.
func (p *Policy) choose(types []string) int {
	typed, catchAll := -1, -1
	for i := range p.Rules {
		r := &p.Rules[i]
		if len(r.On) == 0 {
			if catchAll < 0 || r.attempts() > p.Rules[catchAll].attempts() {
				catchAll = i
			}
			continue
		}
		if anyIn(types, r.On) && (typed < 0 || r.attempts() > p.Rules[typed].attempts()) {
			typed = i
		}
	}
	if typed >= 0 {
		return typed
	}
	return catchAll
}

func anyIn(types, set []string) bool {
	for _, t := range types {
		for _, s := range set {
			if t == s {
				return true
			}
		}
	}
	return false
}
