package reprise_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"reprise"
	"reprise/store"
)

// TestStoredStepScheduledUnderItsCurrentVersion: an engine schedules a
// step defined in the store under the version the store has now, with that
// version's policy, whatever version it registered: another process may
// have defined a later one. Each attempt is told the version.
func TestStoredStepScheduledUnderItsCurrentVersion(t *testing.T) {
	t.Parallel()
	call := reprise.NewWorkflow("call", func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
		return reprise.Call[json.RawMessage](ctx, "charge", in)
	})
	env := newEnv(t, nil, call)
	ctx := t.Context()
	define := func(policy string) *store.StepDefinition {
		t.Helper()
		def, _, err := env.Store.StepDefine(ctx, &store.StepDefineParams{Name: "charge", Kind: "test", Policy: policy})
		if err != nil {
			t.Fatal(err)
		}
		return def
	}

	var mu sync.Mutex
	var seen []int // the StepVersion of each attempt
	failed := false
	run := func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
		info, _ := reprise.StepInfoFrom(ctx)
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, info.StepVersion)
		if !failed {
			failed = true
			return nil, errors.New("once")
		}
		return in, nil
	}
	v1 := define("[retry: 2, backoff: 1s]")
	if err := env.Engine.RegisterStepDefinition(v1, run); err != nil {
		t.Fatal(err)
	}
	define("[retry: 4, backoff: 1m]") // as another server would: this engine is not told

	if _, _, err := env.Engine.StartRun(ctx, "call", json.RawMessage(`1`), reprise.WithRunID("r1")); err != nil {
		t.Fatal(err)
	}
	if r := env.Wait("r1"); r.Status != reprise.RunCompleted {
		t.Fatalf("run = %+v", r)
	}
	scheduled := env.History("r1")[1]
	if scheduled.Type != store.EventStepScheduled || scheduled.Version != 2 || scheduled.Policy != "[retry: 4, backoff: 1m]" {
		t.Fatalf("StepScheduled = %+v, want version 2 with its policy", scheduled)
	}
	if retried := env.History("r1")[3]; retried.Type != store.EventAttemptFailed || retried.Delay.Minutes() != 1 {
		t.Fatalf("the failure = %+v, want a retry after v2's minute", retried)
	}
	mu.Lock()
	if len(seen) != 2 || seen[0] != 2 || seen[1] != 2 {
		t.Errorf("attempts saw versions %v, want [2 2]", seen)
	}
	mu.Unlock()

	// A registration older than the one the engine holds changes nothing,
	// and a Go step cannot be replaced.
	if err := env.Engine.RegisterStepDefinition(v1, run); err != nil {
		t.Fatal(err)
	}
	goStep := reprise.NewStep("echo", func(ctx context.Context, in int) (int, error) { return in, nil })
	if err := env.Engine.Register(goStep); err != nil {
		t.Fatal(err)
	}
	err := env.Engine.RegisterStepDefinition(&store.StepDefinition{Name: "echo", Version: 1, Kind: "test"}, run)
	if !errors.Is(err, store.ErrStepDefinedInGo) || !env.Engine.HasGoStep("echo") {
		t.Fatalf("RegisterStepDefinition over a Go step: %v", err)
	}

	// Deleted, the step is scheduled under no version: this engine stops
	// running it, and its run waits for it to be defined again.
	if err := env.Store.StepDefDelete(ctx, &store.StepDefDeleteParams{Name: "charge"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := env.Engine.StartRun(ctx, "call", json.RawMessage(`2`), reprise.WithRunID("r2")); err != nil {
		t.Fatal(err)
	}
	env.AdvanceUntil(func() bool { return len(env.History("r2")) >= 2 })
	if scheduled := env.History("r2")[1]; scheduled.Type != store.EventStepScheduled || scheduled.Version != 0 {
		t.Fatalf("StepScheduled after the delete = %+v, want no version", scheduled)
	}
	for _, name := range env.Engine.LocalSteps() {
		if name == "charge" {
			t.Fatal("the engine still runs the deleted step")
		}
	}
}
