package reprise_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"reprise"
	"reprise/retry"
	"reprise/store"
)

// typedErr is a step error whose type name policies can match.
type typedErr struct{ typ string }

func (e *typedErr) Error() string     { return e.typ + " happened" }
func (e *typedErr) ErrorType() string { return e.typ }

type failInput struct {
	Type string
	// Hang makes the step wait for its context instead of failing.
	Hang bool
}

var alwaysFail = reprise.NewStep("always-fail", func(ctx context.Context, in failInput) (string, error) {
	if in.Hang {
		<-ctx.Done()
		return "", context.Cause(ctx)
	}
	return "", &typedErr{in.Type}
})

type policyInput struct {
	Policy string
	Fail   failInput
}

var policyWorkflow = reprise.NewWorkflow("policy", func(ctx context.Context, in policyInput) (string, error) {
	return reprise.Step(ctx, alwaysFail, in.Fail, reprise.WithPolicyText(in.Policy))
})

// TestPolicyExamples drives every example of the text form (docs/policies.md) through a real
// workflow on SQLite and checks the attempts and delays in the history.
func TestPolicyExamples(t *testing.T) {
	t.Parallel()
	tests := []struct {
		policy   string
		fail     failInput
		attempts int
		reason   retry.Reason
		// delays, when set, are the exact waits between attempts.
		delays []time.Duration
	}{
		{policy: "[retry: 3, backoff: 60]", fail: failInput{Type: "Boom"}, attempts: 4, reason: retry.ReasonExhausted},
		{policy: "[NetworkError -> retry: 5, backoff: 2m]", fail: failInput{Type: "NetworkError"}, attempts: 6, reason: retry.ReasonExhausted},
		{policy: "[NetworkError -> retry: 5, backoff: 2m]", fail: failInput{Type: "ValueError"}, attempts: 1, reason: retry.ReasonNotCovered},
		{policy: "[(ValueError, KeyError) -> retry: 3, backoff: 30s]", fail: failInput{Type: "KeyError"}, attempts: 4, reason: retry.ReasonExhausted},
		{policy: "[RateLimitError -> retry: 10, backoff: 1m] [NetworkError -> retry: 3, backoff: 30s]", fail: failInput{Type: "RateLimitError"}, attempts: 11, reason: retry.ReasonExhausted},
		{policy: "[RateLimitError -> retry: 10, backoff: 1m] [NetworkError -> retry: 3, backoff: 30s]", fail: failInput{Type: "NetworkError"}, attempts: 4, reason: retry.ReasonExhausted},
		{policy: "[retry: 3, backoff: 60] [timeout: 2m]", fail: failInput{Hang: true}, attempts: 4, reason: retry.ReasonExhausted},
		{policy: "[retry: unlimited, backoff: 100ms, max_backoff: 30s, jitter: full] [timeout: 5s, deadline: 1h]", fail: failInput{Type: "Flaky"}, reason: retry.ReasonDeadline},
		{policy: "[retry: 4, backoff: 1s, backoff_kind: linear]", fail: failInput{Type: "Boom"}, attempts: 5, reason: retry.ReasonExhausted,
			delays: []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second}},
		{policy: "[retry: 5] [Timeout -> retry: 0] [timeout: 1s]", fail: failInput{Hang: true}, attempts: 1, reason: retry.ReasonExhausted},
		{policy: "[retry: 3] [NetworkError -> retry: 5]", fail: failInput{Type: "NetworkError"}, attempts: 6, reason: retry.ReasonExhausted},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%s", tt.policy, tt.fail.Type), func(t *testing.T) {
			t.Parallel()
			pol, err := retry.Parse(tt.policy)
			if err != nil {
				t.Fatal(err)
			}
			env := newEnv(t, nil, policyWorkflow, alwaysFail)
			h, err := policyWorkflow.Start(t.Context(), env.Engine, policyInput{Policy: tt.policy, Fail: tt.fail})
			if err != nil {
				t.Fatal(err)
			}
			run := env.Wait(h.ID)
			if run.Status != reprise.RunFailed {
				t.Fatalf("run status = %s, want failed", run.Status)
			}
			checkAttempts(t, env.History(h.ID), &pol, tt.attempts, tt.reason, tt.delays, tt.fail)
		})
	}
}

// checkAttempts checks a one-step history against what the policy decides.
func checkAttempts(t *testing.T, events []reprise.Event, pol *retry.Policy, attempts int, reason retry.Reason, delays []time.Duration, fail failInput) {
	t.Helper()
	var started, failed []reprise.Event
	var stepFailed *reprise.Event
	var key string
	for i, ev := range events {
		switch ev.Type {
		case store.EventStepScheduled:
			key = ev.IdempotencyKey
		case store.EventAttemptStarted:
			if ev.Attempt != len(started)+1 {
				t.Errorf("AttemptStarted #%d has attempt %d", len(started)+1, ev.Attempt)
			}
			started = append(started, ev)
		case store.EventAttemptFailed:
			failed = append(failed, ev)
		case store.EventStepFailed:
			stepFailed = &events[i]
		}
	}
	if attempts > 0 && len(started) != attempts {
		t.Fatalf("%d attempts started, want %d", len(started), attempts)
	}
	if len(failed) != len(started) {
		t.Fatalf("%d attempts failed, %d started", len(failed), len(started))
	}
	if stepFailed == nil || retry.Reason(stepFailed.Reason) != reason || stepFailed.Attempt != len(started) {
		t.Fatalf("StepFailed = %+v, want reason %s after %d attempts", stepFailed, reason, len(started))
	}
	if len(delays) > 0 && len(delays) != len(failed)-1 {
		t.Fatalf("%d attempts failed, want %d (one more than the delays %v)", len(failed), len(delays)+1, delays)
	}
	wantType := fail.Type
	if fail.Hang {
		wantType = reprise.TypeTimeout
	}
	var elapsed time.Duration
	for i, f := range failed {
		if f.Error == nil || f.Error.Type != wantType {
			t.Errorf("attempt %d error = %+v, want type %s", i+1, f.Error, wantType)
		}
		if fail.Hang && f.At.Sub(started[i].At) != pol.Timeout {
			t.Errorf("attempt %d failed %v after it started, want its timeout %v", i+1, f.At.Sub(started[i].At), pol.Timeout)
		}
		elapsed = f.At.Sub(started[0].At)
		d := pol.Decide(&retry.Failure{Attempt: i + 1, Types: []string{wantType}, Elapsed: elapsed, Key: key})
		if i == len(failed)-1 {
			if d.Retry || f.Reason != string(reason) {
				t.Errorf("last attempt: decision %+v, recorded reason %q", d, f.Reason)
			}
			break
		}
		// A store keeps times to its precision (microseconds for PostgreSQL).
		if !d.Retry || f.Delay != d.Delay || f.RetryAt.Sub(f.At.Add(d.Delay)).Abs() >= time.Microsecond {
			t.Errorf("attempt %d: recorded delay %v retry_at %v, policy says %+v", i+1, f.Delay, f.RetryAt, d)
		}
		if len(delays) > 0 && f.Delay != delays[i] {
			t.Errorf("attempt %d: delay %v, want %v", i+1, f.Delay, delays[i])
		}
		if f.Rule == "" {
			t.Errorf("attempt %d: no rule recorded", i+1)
		}
		// The retry starts exactly when planned: the fake clock has no lateness.
		if got := started[i+1].At; !got.Equal(f.RetryAt) {
			t.Errorf("attempt %d started at %v, planned %v", i+2, got, f.RetryAt)
		}
	}
	if pol.Deadline > 0 && elapsed > pol.Deadline {
		t.Errorf("last attempt ended %v after the first started, past the %v deadline", elapsed, pol.Deadline)
	}
}

func TestPerNameDefaultPolicies(t *testing.T) {
	t.Parallel()
	fail := func(ctx context.Context, _ int) (int, error) { return 0, errors.New("no") }
	chat := reprise.NewStep("llm.chat", fail)
	embed := reprise.NewStep("llm.embed", fail)
	tool := reprise.NewStep("tool.search", fail)
	other := reprise.NewStep("other", fail)
	// Every step fails for good, and the workflow goes on to the next.
	failed := func(_ int, err error) error {
		if err == nil {
			return errors.New("a step that always fails succeeded")
		}
		return nil
	}
	wf := reprise.NewWorkflow("defaults", func(ctx context.Context, _ int) (int, error) {
		return 0, errors.Join(
			failed(reprise.Step(ctx, chat, 0)),
			failed(reprise.Step(ctx, embed, 0)),
			failed(reprise.Step(ctx, tool, 0)),
			failed(reprise.Step(ctx, other, 0)),
			failed(reprise.Step(ctx, tool, 0, reprise.WithPolicy(retry.Never))), // the call site wins
		)
	})
	def := retry.Attempts(1, retry.None)
	env := newEnv(t, &reprise.Config{
		DefaultPolicy: &def,
		Policies: map[string]retry.Policy{
			"llm.*":    retry.Attempts(3, retry.None),
			"llm.chat": retry.Attempts(4, retry.None),
			"tool.*":   retry.Attempts(2, retry.None),
		},
	}, wf, chat, embed, tool, other)
	h, err := wf.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	if run := env.Wait(h.ID); run.Status != reprise.RunCompleted {
		t.Fatalf("run %s: %v", run.Status, run.Error)
	}
	want := map[int]int{1: 4, 2: 3, 3: 2, 4: 1, 5: 1}
	got := map[int]int{}
	for _, ev := range env.History(h.ID) {
		if ev.Type == store.EventStepFailed {
			got[ev.Position] = ev.Attempt
		}
	}
	for pos, n := range want {
		if got[pos] != n {
			t.Errorf("position %d made %d attempts, want %d", pos, got[pos], n)
		}
	}
}
