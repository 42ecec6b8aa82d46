package reprise_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"testing"

	"reprise"
	"reprise/retry"
	"reprise/store"
)

// orderError is a workflow's own error type around a step's failure.
type orderError struct{ err error }

func (e *orderError) Error() string     { return "order failed: " + e.err.Error() }
func (e *orderError) ErrorType() string { return "OrderFailed" }
func (e *orderError) Unwrap() error     { return e.err }

// TestRunFailsWithTheStepsError: a run whose workflow returns a step's
// StepError fails with the step's error type and message, and says which
// step, after how many attempts and why it stopped, in the run, its
// RunFailed event and the error Result returns (it used to be a
// "StepError" whose message held all of that).
func TestRunFailsWithTheStepsError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// policy of the step; err what each attempt returns.
		policy string
		err    error
		// wrap is what the workflow does with the step's error.
		wrap     func(error) error
		attempts int
		reason   retry.Reason
		typ      string
		// msg is the message kept, when not the error's own.
		msg string
	}{
		{name: "exhausted", policy: "[retry: 2, backoff: 1s]", err: retry.NewError("CardDeclined", "card declined"),
			attempts: 3, reason: retry.ReasonExhausted, typ: "CardDeclined"},
		{name: "permanent", policy: "[retry: 2]", err: reprise.Permanent(retry.NewError("HTTP4xx", "422 Unprocessable")),
			attempts: 1, reason: retry.ReasonPermanent, typ: "HTTP4xx"},
		{name: "not covered", policy: "[NetworkError -> retry: 5]", err: retry.NewError("CardDeclined", "card declined"),
			attempts: 1, reason: retry.ReasonNotCovered, typ: "CardDeclined"},
		{name: "deadline", policy: "[retry: unlimited, backoff: 1m, backoff_kind: fixed] [deadline: 150s]",
			err: retry.NewError("Busy", "try later"), attempts: 3, reason: retry.ReasonDeadline, typ: "Busy",
			msg: "try later (next retry in 1m0s would pass the 2m30s deadline)"},
		{name: "wrapped", policy: "[retry: 1, backoff: 1s]", err: retry.NewError("CardDeclined", "card declined"),
			wrap:     func(err error) error { return fmt.Errorf("charge order 7: %w", err) },
			attempts: 2, reason: retry.ReasonExhausted, typ: "CardDeclined"},
		{name: "joined", policy: "[retry: 0]", err: retry.NewError("CardDeclined", "card declined"),
			wrap:     func(err error) error { return errors.Join(err, errors.New("and then some")) },
			attempts: 1, reason: retry.ReasonExhausted, typ: "CardDeclined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			charge := reprise.NewStep("charge", func(ctx context.Context, _ int) (int, error) {
				return 0, tt.err
			}, reprise.WithPolicyText(tt.policy))
			noop := reprise.NewStep("reserve", func(ctx context.Context, n int) (int, error) { return n, nil })
			wf := reprise.NewWorkflow("order", func(ctx context.Context, n int) (int, error) {
				if _, err := reprise.Step(ctx, noop, n); err != nil {
					return 0, err
				}
				_, err := reprise.Step(ctx, charge, n)
				if err != nil && tt.wrap != nil {
					err = tt.wrap(err)
				}
				return 0, err
			})
			env := newEnv(t, nil, wf, charge, noop)
			h, err := wf.Start(t.Context(), env.Engine, 1)
			if err != nil {
				t.Fatal(err)
			}
			run := env.Wait(h.ID)
			want := reprise.ErrorInfo{Type: tt.typ, Message: cmp.Or(tt.msg, messageOf(tt.err)), Step: "charge", Position: 2,
				Attempts: tt.attempts, Reason: string(tt.reason)}
			if run.Status != reprise.RunFailed || run.Error == nil || *run.Error != want {
				t.Fatalf("run %s: error %+v, want %+v", run.Status, run.Error, want)
			}
			events := env.History(h.ID)
			if last := events[len(events)-1]; last.Type != store.EventRunFailed || last.Error == nil || *last.Error != want {
				t.Errorf("last event %s: error %+v, want %+v", last.Type, last.Error, want)
			}

			_, err = h.Result(t.Context())
			var re *reprise.RunError
			if !errors.As(err, &re) || re.Type != tt.typ || re.Message != want.Message {
				t.Fatalf("Result: %v, want a RunError of type %s", err, tt.typ)
			}
			var se *reprise.StepError
			if !errors.As(err, &se) {
				t.Fatalf("Result: %v does not wrap a StepError", err)
			}
			wantSE := reprise.StepError{Step: "charge", Position: 2, Attempts: tt.attempts, Reason: tt.reason,
				Type: tt.typ, Message: want.Message}
			if *se != wantSE {
				t.Errorf("StepError %+v, want %+v", *se, wantSE)
			}
			if types := retry.TypeChain(err); len(types) != 1 || types[0] != tt.typ {
				t.Errorf("type chain of the run's error: %v, want [%s]", types, tt.typ)
			}
		})
	}
}

// messageOf is the message the history keeps of a step's error.
func messageOf(err error) string {
	var re *retry.Error
	if errors.As(err, &re) {
		return re.Message
	}
	return err.Error()
}

// TestRunErrorOfItsOwnType: a workflow that wraps a step's error in an
// error type of its own fails with that type and message, and names no
// step; Result's error does not wrap a StepError.
func TestRunErrorOfItsOwnType(t *testing.T) {
	t.Parallel()
	charge := reprise.NewStep("charge", func(ctx context.Context, _ int) (int, error) {
		return 0, reprise.Permanent(retry.NewError("CardDeclined", "card declined"))
	})
	wf := reprise.NewWorkflow("order", func(ctx context.Context, n int) (int, error) {
		_, err := reprise.Step(ctx, charge, n)
		return 0, &orderError{err}
	})
	env := newEnv(t, nil, wf, charge)
	h, err := wf.Start(t.Context(), env.Engine, 1)
	if err != nil {
		t.Fatal(err)
	}
	run := env.Wait(h.ID)
	if run.Error == nil || run.Error.Type != "OrderFailed" || run.Error.Step != "" || run.Error.Attempts != 0 ||
		run.Error.Message != "order failed: step charge (position 1) failed after 1 attempt(s), permanent: CardDeclined: card declined" {
		t.Fatalf("run error %+v", run.Error)
	}
	_, err = h.Result(t.Context())
	var se *reprise.StepError
	if errors.As(err, &se) {
		t.Errorf("Result: %v wraps a StepError", err)
	}
}

// TestChildErrorNamesTheChildsStep: a parent sees a child failed by a step
// as a ChildError of the step's type that names the child's step; a parent
// that returns it fails with the child's type, naming no step of its own.
func TestChildErrorNamesTheChildsStep(t *testing.T) {
	t.Parallel()
	charge := reprise.NewStep("charge", func(ctx context.Context, _ int) (int, error) {
		return 0, reprise.Permanent(retry.NewError("CardDeclined", "card declined"))
	})
	child := reprise.NewWorkflow("pay", func(ctx context.Context, n int) (int, error) {
		return reprise.Step(ctx, charge, n)
	})
	parent := reprise.NewWorkflow("order", func(ctx context.Context, n int) (int, error) {
		_, err := reprise.Child(ctx, child, n).Get(ctx)
		var ce *reprise.ChildError
		if !errors.As(err, &ce) || ce.StepError == nil {
			return 0, fmt.Errorf("want a ChildError naming a StepError, got %v", err)
		}
		if se := ce.StepError; ce.Type != "CardDeclined" || se.Step != "charge" || se.Position != 1 || se.Reason != retry.ReasonPermanent {
			return 0, fmt.Errorf("got %+v and %+v", ce, se)
		}
		return 0, err
	})
	env := newEnv(t, nil, parent, child, charge)
	h, err := parent.Start(t.Context(), env.Engine, 1)
	if err != nil {
		t.Fatal(err)
	}
	run := env.Wait(h.ID)
	if run.Error == nil || run.Error.Type != "CardDeclined" || run.Error.Step != "" ||
		run.Error.Message != "child run "+h.ID+"/1 failed: CardDeclined: card declined" {
		t.Fatalf("run error %+v", run.Error)
	}
	kid := env.Wait(h.ID + "/1")
	if kid.Error == nil || kid.Error.Step != "charge" || kid.Error.Type != "CardDeclined" {
		t.Errorf("child's error %+v", kid.Error)
	}
}

// TestRunErrorOfATimeout: a step whose attempts time out fails the run
// with the engine's own type for it.
func TestRunErrorOfATimeout(t *testing.T) {
	t.Parallel()
	slow := reprise.NewStep("slow", func(ctx context.Context, _ int) (int, error) {
		<-ctx.Done()
		return 0, context.Cause(ctx)
	}, reprise.WithPolicyText("[retry: 1, backoff: 1s] [timeout: 10s]"))
	wf := reprise.NewWorkflow("wait", func(ctx context.Context, n int) (int, error) {
		return reprise.Step(ctx, slow, n)
	})
	env := newEnv(t, nil, wf, slow)
	h, err := wf.Start(t.Context(), env.Engine, 1)
	if err != nil {
		t.Fatal(err)
	}
	run := env.Wait(h.ID)
	if run.Error == nil || run.Error.Type != reprise.TypeTimeout || run.Error.Step != "slow" || run.Error.Attempts != 2 ||
		run.Error.Reason != string(retry.ReasonExhausted) {
		t.Fatalf("run error %+v", run.Error)
	}
	_, err = h.Result(t.Context())
	if types := retry.TypeChain(err); len(types) == 0 || types[0] != reprise.TypeTimeout {
		t.Errorf("Result's type chain %v", types)
	}
}
