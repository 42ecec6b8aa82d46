package reprise_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"reprise"
	"reprise/retry"
	"reprise/store"
)

// pulledInput is the input of a workflow whose one step a pull worker
// runs.
type pulledInput struct {
	Policy string
}

var pulledWorkflow = reprise.NewWorkflow("pulled", func(ctx context.Context, in pulledInput) (string, error) {
	return reprise.Call[string](ctx, "pulled", 0, reprise.WithPolicyText(in.Policy))
})

// TestFailureTypes pins the error type each way an attempt can end badly
// is recorded with, and how the step stops.
func TestFailureTypes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		policy string
		// fail is the local step's behaviour; pull, when set, runs the
		// step by a pull worker that never reports, heartbeating at the
		// given offsets from its claim.
		fail  failInput
		pull  bool
		beats []time.Duration
		// types are the attempts' error types, in order; reason is why
		// the step stopped.
		types  []string
		reason retry.Reason
	}{
		{
			name:   "attempt over its timeout",
			policy: "[retry: 1, backoff: 1s] [timeout: 5s]", fail: failInput{Hang: true},
			types: []string{reprise.TypeTimeout, reprise.TypeTimeout}, reason: retry.ReasonExhausted,
		},
		{
			name:   "attempt cut by the step's deadline",
			policy: "[retry: unlimited, backoff: 100ms] [deadline: 2s]", fail: failInput{Hang: true},
			types: []string{reprise.TypeDeadlineExceeded}, reason: retry.ReasonDeadline,
		},
		{
			name:   "deadline before the next retry",
			policy: "[retry: 5, backoff: 10s, backoff_kind: fixed] [deadline: 15s]", fail: failInput{Type: "Boom"},
			types: []string{"Boom", "Boom"}, reason: retry.ReasonDeadline,
		},
		{
			name:   "pull worker stops heartbeating: lost, and retried despite the Timeout rule",
			policy: "[retry: 1, backoff: 1s] [Timeout -> retry: 0] [timeout: 1h]", pull: true,
			types: []string{reprise.TypeWorkerLost, reprise.TypeWorkerLost}, reason: retry.ReasonExhausted,
		},
		{
			name:   "pull worker past a timeout shorter than its lease",
			policy: "[retry: 1, backoff: 1s] [Timeout -> retry: 0] [timeout: 5s]", pull: true,
			types: []string{reprise.TypeTimeout}, reason: retry.ReasonExhausted,
		},
		{
			name:   "pull worker heartbeating past its timeout",
			policy: "[retry: 1, backoff: 1s] [Timeout -> retry: 0] [timeout: 15s]", pull: true,
			beats: []time.Duration{5 * time.Second},
			types: []string{reprise.TypeTimeout}, reason: retry.ReasonExhausted,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := newEnv(t, &reprise.Config{LeaseTTL: 10 * time.Second}, policyWorkflow, alwaysFail, pulledWorkflow)
			var id string
			if tt.pull {
				if err := env.Engine.RegisterRemoteStep("pulled", nil); err != nil {
					t.Fatal(err)
				}
				h, err := pulledWorkflow.Start(t.Context(), env.Engine, pulledInput{Policy: tt.policy})
				if err != nil {
					t.Fatal(err)
				}
				id = h.ID
				env.AdvanceUntil(func() bool {
					claimed, err := env.Engine.ClaimTasks(t.Context(), "worker-1", []string{"pulled"}, 1)
					if err != nil {
						t.Fatal(err)
					}
					for _, task := range claimed {
						for _, d := range tt.beats {
							env.Clock.AfterFunc(d, func() {
								if _, err := env.Engine.HeartbeatTask(t.Context(), task.ID, task.Token); err != nil {
									t.Error(err)
								}
							})
						}
					}
					run, err := env.Store.RunGet(t.Context(), id)
					return err == nil && run.Status.Final()
				})
			} else {
				h, err := policyWorkflow.Start(t.Context(), env.Engine, policyInput{Policy: tt.policy, Fail: tt.fail})
				if err != nil {
					t.Fatal(err)
				}
				id = h.ID
				env.Wait(id)
			}
			var types []string
			var stopped *reprise.Event
			for _, ev := range env.History(id) {
				switch ev.Type {
				case store.EventAttemptFailed:
					types = append(types, ev.Error.Type)
				case store.EventStepFailed:
					stopped = &ev
				}
			}
			if !slices.Equal(types, tt.types) {
				t.Errorf("attempts failed as %v, want %v", types, tt.types)
			}
			if stopped == nil {
				t.Fatal("no StepFailed")
			}
			if stopped.Reason != string(tt.reason) || stopped.Error.Type != tt.types[len(tt.types)-1] {
				t.Errorf("step stopped with %s, %s: %s; want %s, %s", stopped.Reason, stopped.Error.Type, stopped.Error.Message,
					tt.reason, tt.types[len(tt.types)-1])
			}
		})
	}
}
