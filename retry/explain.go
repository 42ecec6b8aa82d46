package retry

import "time"

// An Explained decision is one line of Explain: what the policy decides
// when attempt Attempt fails.
type Explained struct {
	// Attempt is the number of the attempt that failed, as the policy
	// counts it (from 1).
	Attempt int
	Decision
	// At is the time from the start of the step's first attempt to the
	// start of the next attempt when the step retries, or to the failure
	// when it stops: the failure's Elapsed plus the delays before it.
	At time.Duration
}

// Explain lists what p decides if attempt f.Attempt and every attempt
// after it fail as f does, each at once (an attempt is taken to last no
// time): one decision per attempt, ending with the first that stops. It
// lists at most limit decisions, and more reports that it stopped there
// while p would retry again. With limit 0 it lists as many as the rule
// that decides f has attempts left, at most 100, or 10 when that rule
// retries without limit.
//
// It is what `reprise policy explain` prints, and what the web page says
// a step still running would do next.
func (p *Policy) Explain(f Failure, limit int) (decisions []Explained, more bool) {
	if f.Attempt < 1 {
		f.Attempt = 1
	}
	if limit <= 0 {
		limit = 10
		if first := p.Decide(&f); first.Rule >= 0 {
			if n := p.Rules[first.Rule].MaxAttempts; n != Unlimited {
				limit = min(max(n-f.Attempt+1, 1), 100)
			}
		}
	}
	for range limit {
		d := p.Decide(&f)
		e := Explained{Attempt: f.Attempt, Decision: d, At: f.Elapsed}
		if d.Retry {
			f.Elapsed += d.Delay
			e.At = f.Elapsed
		}
		decisions = append(decisions, e)
		if !d.Retry {
			return decisions, false
		}
		f.Attempt++
	}
	return decisions, true
}
