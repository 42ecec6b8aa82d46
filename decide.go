package reprise

import (
	"fmt"
	"time"

	"reprise/retry"
	"reprise/store"
)

// The rules recorded in AttemptFailed when a step's own hooks decided.
const (
	RuleRetryIf   = "retry_if predicate"
	RuleNextDelay = "then next_delay hook"
)

// decide turns a failed attempt t into what TaskFail records: the error,
// whether and when the step is retried, and the reason and rule that
// decided. It is the one place this is decided, for attempts run here
// (finishAttempt), by pull workers (FailTask) and whose lease lapsed (reap:
// lapsed set, err from lapseError). The steps, in order:
//
//  1. Without a policy (pol nil: t's could not be read) the step fails as
//     permanent.
//  2. The step's WithRetryIf predicate, saying no to an error that is not
//     permanent already, fails it as permanent.
//  3. The policy decides (retry.Policy.Decide) by the attempt's number
//     since the last redrive and the time since the first attempt started.
//  4. The step's WithNextDelay hook may replace a retry's delay. A retry
//     that would then start past the deadline, and any retry once the
//     deadline has passed, fails the step with reason deadline.
//  5. A lease that lapsed PoisonAfter times in a row fails the step as
//     Poison, whatever came before.
func (e *Engine) decide(t *store.Task, err error, pol *compiledPolicy, lapsed bool) *store.TaskFailParams {
	p := &store.TaskFailParams{TaskID: t.ID, Token: t.Token, Attempt: t.Attempt, Error: *errorInfo(err), Expired: lapsed}
	var cfg stepConfig
	if pol != nil {
		e.mu.Lock()
		if s := e.steps[t.Step]; s != nil {
			cfg = s.cfg
		}
		e.mu.Unlock()
	}
	switch {
	case pol == nil:
		p.Reason = string(retry.ReasonPermanent)
	case cfg.retryIf != nil && !retry.IsPermanent(err) && !cfg.retryIf(err):
		p.Reason, p.Rule = string(retry.ReasonPermanent), RuleRetryIf
	default:
		elapsed := e.clock.Now().Sub(firstStart(t))
		d := pol.Decide(&retry.Failure{
			Attempt:    t.Attempt - t.Base,
			Types:      retry.TypeChain(err),
			Permanent:  retry.IsPermanent(err),
			RetryAfter: retry.RetryAfterOf(err),
			Elapsed:    elapsed,
			Key:        t.IdempotencyKey,
		})
		p.Retry, p.Delay, p.Reason = d.Retry, d.Delay, string(d.Reason)
		if d.Rule >= 0 {
			p.Rule = pol.rules[d.Rule]
		}
		if d.Retry && cfg.nextDelay != nil {
			if nd, ok := cfg.nextDelay(t.Attempt, err); ok {
				p.Delay, p.Rule = max(nd, 0), p.Rule+" "+RuleNextDelay
				if pol.Deadline > 0 && elapsed+p.Delay > pol.Deadline {
					d.Reason, p.Retry, p.Reason = retry.ReasonDeadline, false, string(retry.ReasonDeadline)
				}
			}
		}
		if p.Retry && pol.Deadline > 0 && elapsed >= pol.Deadline {
			// No retry can start before a deadline that has passed, not
			// even one at once.
			d.Reason, p.Retry, p.Reason = retry.ReasonDeadline, false, string(retry.ReasonDeadline)
		}
		if d.Reason == retry.ReasonDeadline && p.Error.Type != TypeDeadlineExceeded {
			p.Error.Message = fmt.Sprintf("%s (next retry in %v would pass the %v deadline)", p.Error.Message, p.Delay, pol.Deadline)
		}
	}
	if n := t.Lapses + 1; lapsed && e.cfg.PoisonAfter > 0 && n >= e.cfg.PoisonAfter {
		p.Error = ErrorInfo{Type: TypePoison, Message: fmt.Sprintf(
			"the lease of attempt %d lapsed without a result, %d times in a row: its workers keep dying", t.Attempt, n)}
		p.Retry, p.Delay, p.Reason = false, 0, string(retry.ReasonPermanent)
		p.Rule = fmt.Sprintf("poison after %d lapses", e.cfg.PoisonAfter)
	}
	return p
}

// firstStart is when the step's first attempt started.
func firstStart(t *store.Task) time.Time {
	if t.FirstStartedAt.IsZero() {
		return t.StartedAt
	}
	return t.FirstStartedAt
}
