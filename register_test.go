package reprise_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"reprise"
	"reprise/sqlite"
)

func TestRegisterIsAllOrNothing(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(t.Context(), ":memory:", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e, err := reprise.New(reprise.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	step := func(name string) reprise.Definition {
		return reprise.NewStep(name, func(context.Context, int) (int, error) { return 1, nil })
	}
	wf := reprise.NewWorkflow("order", func(context.Context, int) (int, error) { return 1, nil })

	err = e.Register(wf, step("charge"), step("ship"), step("charge"))
	if err == nil || !strings.Contains(err.Error(), `step "charge" is given twice, as definitions 2 and 4`) {
		t.Fatalf("Register with a duplicate = %v, want an error naming both", err)
	}
	err = e.Register(step("refund"), step(""))
	if err == nil || !strings.Contains(err.Error(), "definition 2: step name is empty") {
		t.Fatalf("Register with an empty name = %v, want an error naming it", err)
	}
	// Nothing of either call was registered.
	if _, _, err := e.StartRun(t.Context(), "order", nil); !errors.Is(err, reprise.ErrNotRegistered) {
		t.Fatalf("StartRun of a workflow from a refused Register: %v, want ErrNotRegistered", err)
	}
	if steps := e.LocalSteps(); len(steps) != 0 {
		t.Fatalf("steps registered by refused calls: %v", steps)
	}
	// A workflow and a step may share a name; a later call replaces.
	if err := e.Register(wf, step("order"), step("charge")); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if err := e.Register(step("charge")); err != nil {
		t.Fatalf("Register again in a later call: %v", err)
	}
}
