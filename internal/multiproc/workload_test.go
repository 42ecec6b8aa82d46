package multiproc

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"time"

	"reprise"
	"reprise/retry"
	"reprise/store"
)

// The chaos workload: a run calls chaosSteps steps one after the other and
// stops at the first that fails. Each attempt's fate (success, a retryable
// error, a permanent error) and length follow from a hash of the step's
// idempotency key and the attempt's number, so the expected history of
// every run can be computed from the history itself (checkRun).

const (
	chaosWorkflowName = "multiproc.chaos"
	chaosStepName     = "multiproc.flaky"
	chaosSteps        = 3
	chaosMaxAttempts  = 4
)

// chaosPolicy: chaosMaxAttempts attempts, a short fixed backoff. The
// middle step retries at once instead (chaosAtOnce), so that its retries
// are leased in the failure's own write, and kept in place by the store
// that can.
const (
	chaosPolicy = "[retry: 3, backoff: 20ms, backoff_kind: fixed]"
	chaosAtOnce = "[retry: 3, backoff_kind: none]"
)

type fate int

const (
	fateOK fate = iota
	fateRetryable
	fatePermanent
)

// attemptFate decides an attempt: 60% succeed, 30% fail and may be
// retried, 10% fail for good; and how long the attempt takes (up to 20 ms).
func attemptFate(key string, attempt int) (fate, time.Duration) {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", key, attempt)
	v := h.Sum64()
	d := time.Duration(v>>32%20) * time.Millisecond
	switch p := v % 100; {
	case p < 60:
		return fateOK, d
	case p < 90:
		return fateRetryable, d
	}
	return fatePermanent, d
}

type chaosInput struct {
	Run  int `json:"run"`
	Step int `json:"step"`
}

var chaosStep = reprise.NewStep(chaosStepName, func(ctx context.Context, in chaosInput) (int, error) {
	info, _ := reprise.StepInfoFrom(ctx)
	f, d := attemptFate(info.IdempotencyKey, info.Attempt)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	}
	switch f {
	case fateRetryable:
		return 0, retry.NewError("Flaky", fmt.Sprintf("attempt %d", info.Attempt))
	case fatePermanent:
		return 0, reprise.Permanent(retry.NewError("Broken", fmt.Sprintf("attempt %d", info.Attempt)))
	}
	return info.Attempt, nil
}, reprise.WithPolicyText(chaosPolicy))

var chaosWorkflow = reprise.NewWorkflow(chaosWorkflowName, func(ctx context.Context, run int) ([]int, error) {
	var out []int
	for i := range chaosSteps {
		var opts []reprise.StepOption
		if i == 1 {
			opts = append(opts, reprise.WithPolicyText(chaosAtOnce))
		}
		n, err := reprise.Step(ctx, chaosStep, chaosInput{Run: run, Step: i}, opts...)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
})

// checkRun checks a finished run of the chaos workload against its history:
// the history is gapless, every scheduled step has exactly one outcome,
// attempts are numbered 1, 2, 3... with each started only after the previous
// one failed, every attempt ended as its fate says (or, where mayTimeOut
// allows it for the attempt's worker, with the lease reaper's Timeout or
// WorkerLost), the
// policy's decisions follow, and the run ended as its steps say.
func checkRun(run *store.Run, events []store.Event, mayTimeOut func(worker string) bool) error {
	if !run.Status.Final() {
		return fmt.Errorf("run %s is %s", run.ID, run.Status)
	}
	for i, ev := range events {
		if ev.Seq != int64(i+1) {
			return fmt.Errorf("event %d has seq %d", i, ev.Seq)
		}
	}
	if len(events) == 0 || events[0].Type != store.EventRunStarted {
		return fmt.Errorf("history does not start with RunStarted")
	}

	type stepState struct {
		key        string
		attempt    int       // last attempt started
		worker     string    // its worker
		leaseUntil time.Time // its first lease
		open       bool      // started, no AttemptFailed or outcome yet
		retry      bool      // the last attempt failed and is to be retried
		outcome    store.EventType
		attempts   int // recorded on the outcome
		output     json.RawMessage
	}
	steps := map[int]*stepState{}
	var order []int
	var end *store.Event
	for i := range events[1:] {
		ev := &events[i+1]
		if end != nil {
			return fmt.Errorf("seq %d: %s after the run's end", ev.Seq, ev.Type)
		}
		st := steps[ev.Position]
		if ev.Type != store.EventStepScheduled && ev.Position != 0 && st == nil {
			return fmt.Errorf("seq %d: %s of position %d, which was never scheduled", ev.Seq, ev.Type, ev.Position)
		}
		if st != nil && st.outcome != "" {
			return fmt.Errorf("seq %d: %s of position %d after its outcome %s", ev.Seq, ev.Type, ev.Position, st.outcome)
		}
		switch ev.Type {
		case store.EventStepScheduled:
			if st != nil {
				return fmt.Errorf("seq %d: position %d scheduled twice", ev.Seq, ev.Position)
			}
			if n := len(order); n > 0 && steps[order[n-1]].outcome != store.EventStepCompleted {
				return fmt.Errorf("seq %d: position %d scheduled before position %d completed", ev.Seq, ev.Position, order[n-1])
			}
			steps[ev.Position] = &stepState{key: ev.IdempotencyKey}
			order = append(order, ev.Position)
		case store.EventAttemptStarted:
			if st.open {
				return fmt.Errorf("seq %d: position %d attempt %d started while attempt %d is running", ev.Seq, ev.Position, ev.Attempt, st.attempt)
			}
			if st.attempt > 0 && !st.retry {
				return fmt.Errorf("seq %d: position %d attempt %d started, but attempt %d was not to be retried", ev.Seq, ev.Position, ev.Attempt, st.attempt)
			}
			if ev.Attempt != st.attempt+1 {
				return fmt.Errorf("seq %d: position %d attempt %d started after attempt %d", ev.Seq, ev.Position, ev.Attempt, st.attempt)
			}
			st.attempt, st.worker, st.open, st.retry = ev.Attempt, ev.Worker, true, false
			st.leaseUntil = ev.LeaseUntil
		case store.EventAttemptFailed:
			if !st.open || ev.Attempt != st.attempt {
				return fmt.Errorf("seq %d: position %d attempt %d failed, but the running attempt is %d (running: %v)", ev.Seq, ev.Position, ev.Attempt, st.attempt, st.open)
			}
			st.open = false
			f, _ := attemptFate(st.key, ev.Attempt)
			switch {
			case ev.Error != nil && (ev.Error.Type == reprise.TypeTimeout || ev.Error.Type == reprise.TypeWorkerLost):
				// The reaper failed the attempt: its lease must have lapsed
				// (heartbeats only extend it), or, lost, been released when
				// its engine was found gone; and its worker be one that may
				// have been cut off.
				early := ev.At.Before(st.leaseUntil) && ev.Error.Type == reprise.TypeTimeout
				if early || !mayTimeOut(st.worker) {
					return fmt.Errorf("seq %d: position %d attempt %d (worker %s, lease until %v) timed out at %v", ev.Seq, ev.Position, ev.Attempt, st.worker, st.leaseUntil, ev.At)
				}
				f = fateRetryable
			case ev.Error == nil:
				return fmt.Errorf("seq %d: AttemptFailed without an error", ev.Seq)
			case f == fateOK:
				return fmt.Errorf("seq %d: position %d attempt %d (worker %s) failed with %s: %s, but its fate is success", ev.Seq, ev.Position, ev.Attempt, st.worker, ev.Error.Type, ev.Error.Message)
			case f == fateRetryable && ev.Error.Type != "Flaky", f == fatePermanent && ev.Error.Type != "Broken":
				return fmt.Errorf("seq %d: position %d attempt %d (worker %s) failed with %s: %s, but its fate is %d", ev.Seq, ev.Position, ev.Attempt, st.worker, ev.Error.Type, ev.Error.Message, f)
			}
			st.retry = f == fateRetryable && ev.Attempt < chaosMaxAttempts
			if st.retry != !ev.RetryAt.IsZero() {
				return fmt.Errorf("seq %d: position %d attempt %d: retry_at %v, want a retry: %v", ev.Seq, ev.Position, ev.Attempt, ev.RetryAt, st.retry)
			}
		case store.EventStepCompleted:
			f, _ := attemptFate(st.key, st.attempt)
			if !st.open || ev.Attempt != 0 && ev.Attempt != st.attempt || f != fateOK {
				return fmt.Errorf("seq %d: position %d completed at attempt %d (running: %v, fate %d)", ev.Seq, ev.Position, st.attempt, st.open, f)
			}
			st.open, st.outcome, st.attempts, st.output = false, ev.Type, st.attempt, ev.Output
		case store.EventStepFailed:
			if st.open || st.retry || st.attempt == 0 {
				return fmt.Errorf("seq %d: position %d failed for good, but attempt %d is running (%v) or to be retried (%v)", ev.Seq, ev.Position, st.attempt, st.open, st.retry)
			}
			if ev.Attempt != st.attempt {
				return fmt.Errorf("seq %d: position %d failed after %d attempts, history has %d", ev.Seq, ev.Position, ev.Attempt, st.attempt)
			}
			st.outcome, st.attempts = ev.Type, ev.Attempt
		case store.EventRunCompleted, store.EventRunFailed:
			end = ev
		default:
			return fmt.Errorf("seq %d: unexpected %s", ev.Seq, ev.Type)
		}
	}

	if end == nil {
		return fmt.Errorf("run %s is %s, history has no end", run.ID, run.Status)
	}
	var outputs []int
	failed := false
	for _, pos := range order {
		st := steps[pos]
		switch st.outcome {
		case store.EventStepCompleted:
			var n int
			if err := json.Unmarshal(st.output, &n); err != nil || n != st.attempts {
				return fmt.Errorf("position %d: output %s, want %d", pos, st.output, st.attempts)
			}
			outputs = append(outputs, n)
		case store.EventStepFailed:
			failed = true
		default:
			return fmt.Errorf("position %d has no outcome", pos)
		}
	}
	if failed {
		if run.Status != store.RunFailed || end.Type != store.EventRunFailed {
			return fmt.Errorf("a step failed, the run is %s (%s)", run.Status, end.Type)
		}
		return nil
	}
	if len(order) != chaosSteps || run.Status != store.RunCompleted || end.Type != store.EventRunCompleted {
		return fmt.Errorf("%d steps completed, the run is %s (%s)", len(order), run.Status, end.Type)
	}
	want, _ := json.Marshal(outputs)
	if string(run.Output) != string(want) {
		return fmt.Errorf("run output %s, want %s", run.Output, want)
	}
	return nil
}
