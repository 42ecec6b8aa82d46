package reprise

import (
	"context"
	"errors"
)

// A Saga undoes a workflow's completed steps when a later one fails for
// good: register a compensation after each step that succeeds, and call
// Compensate on failure. Compensations are ordinary steps, each with its
// own retry policy, so they are durable and recorded like any other.
//
//	var saga reprise.Saga
//	charge, err := reprise.Step(ctx, chargeCard, order)
//	if err != nil {
//		return err
//	}
//	reprise.OnFailure(&saga, refundCard, charge, reprise.WithPolicyText("[retry: unlimited, backoff: 1s, max_backoff: 5m]"))
//	if _, err := reprise.Step(ctx, ship, order); err != nil {
//		return errors.Join(err, saga.Compensate(ctx))
//	}
type Saga struct {
	undo []func(context.Context) error
}

// OnFailure registers step s with input in as the compensation of what
// was just done.
func OnFailure[I, O any](saga *Saga, s *StepDef[I, O], in I, opts ...StepOption) {
	saga.Add(func(ctx context.Context) error {
		_, err := Step(ctx, s, in, opts...)
		return err
	})
}

// Add registers a compensation written as workflow code (it may call
// several steps).
func (s *Saga) Add(undo func(context.Context) error) {
	s.undo = append(s.undo, undo)
}

// Compensate runs the compensations in reverse order of registration. A
// compensation that fails after its policy's attempts does not stop the
// others; their errors are joined.
func (s *Saga) Compensate(ctx context.Context) error {
	var errs []error
	for i := len(s.undo) - 1; i >= 0; i-- {
		if err := s.undo[i](ctx); err != nil {
			errs = append(errs, err)
		}
	}
	s.undo = nil
	return errors.Join(errs...)
}
