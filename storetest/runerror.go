package storetest

import (
	"testing"

	"reprise/store"
)

// testRunErrorOfAStep pins that a run's error keeps the fields that say
// which step failed it, in the run (RunGet, RunList), its RunFailed and a
// parent's ChildFailed.
func testRunErrorOfAStep(t *testing.T, open Open) {
	f := setup(t, open)
	runErr := &store.ErrorInfo{Type: "CardDeclined", Message: "card declined", Step: "charge", Position: 2,
		Attempts: 3, Reason: "exhausted"}

	lease := f.schedule("run-1", newStep(1, "reserve"), newStep(2, "charge"))
	events := f.advance(lease, store.RunAdvanceParams{Finish: &store.RunFinish{Status: store.RunFailed, Error: runErr}})
	want := []store.Event{{Seq: 4, Type: store.EventRunFailed, At: start, Execution: 1, Error: runErr}}
	requireEvents(t, events, want)
	requireEvents(t, f.last("run-1", 1), want)
	if run := f.get("run-1"); run.Error == nil || *run.Error != *runErr {
		t.Fatalf("RunGet: error %+v, want %+v", run.Error, runErr)
	}
	runs, err := f.store.RunList(t.Context(), &store.RunListParams{Status: store.RunFailed})
	if err != nil {
		t.Fatalf("RunList: %v", err)
	}
	if len(runs) != 1 || runs[0].Error == nil || *runs[0].Error != *runErr {
		t.Fatalf("RunList: %+v, want run-1 with error %+v", runs, runErr)
	}

	parent := f.create("parent")
	child := f.startChildRun(parent, 1, "child")
	adv := f.advanced(child, store.RunAdvanceParams{Finish: &store.RunFinish{Status: store.RunFailed, Error: runErr}})
	want = []store.Event{{Seq: 3, Type: store.EventChildFailed, At: start, Execution: 1, Position: 1, Child: "child",
		Error: runErr, ChildStatus: "failed"}}
	if adv.Parent == nil {
		t.Fatal("Advanced.Parent = nil, want the parent's ChildFailed")
	}
	requireEvents(t, adv.Parent.Events, want)
	requireEvents(t, f.last("parent", 1), want)
}
