package storetest

import (
	"encoding/json"
	"maps"
	"testing"
	"time"

	"reprise/store"
)

// startChildRun has the parent's lease start a child run at position and
// returns the child's lease, claimed by engine2.
func (f *fixture) startChildRun(parent store.RunLease, position int, id string) store.RunLease {
	f.t.Helper()
	f.advance(parent, store.RunAdvanceParams{Children: []store.ChildSpec{{
		Position: position, ID: id, Workflow: "refund", Input: json.RawMessage(`{"child":"` + id + `"}`),
	}}})
	for _, l := range f.runClaim(engine2, 10) {
		if l.Run.ID == id {
			return l
		}
	}
	f.t.Fatalf("RunClaim did not find child %s", id)
	return store.RunLease{}
}

func testChildren(t *testing.T, open Open) {
	t.Run("StartsUnownedChildWithItsParent", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		parent := f.create("parent")
		f.clock.Advance(time.Second)
		now := f.now()
		input := json.RawMessage(`{"amount":5}`)
		events := f.advance(parent, store.RunAdvanceParams{Children: []store.ChildSpec{{
			Position: 1, ID: "child-1", Workflow: "refund", Input: input,
		}}})
		requireEvents(t, events, []store.Event{{
			Seq: 2, Type: store.EventChildStarted, At: now, Execution: 1, Position: 1,
			Child: "child-1", Workflow: "refund", Input: input,
		}})
		want := store.Run{
			ID: "child-1", Workflow: "refund", Status: store.RunPending, Input: input, Execution: 1,
			ParentID: "parent", CreatedAt: now, UpdatedAt: now,
		}
		if got := normRun(f.get("child-1")); !equalRun(got, want) {
			t.Fatalf("RunGet = %+v, want %+v", got, want)
		}
		requireEvents(t, f.history("child-1"), []store.Event{{
			Seq: 1, Type: store.EventRunStarted, At: now, Execution: 1, Workflow: "refund", Input: input,
		}})
		runs, err := f.store.RunList(t.Context(), &store.RunListParams{Workflow: "refund"})
		if err != nil || len(runs) != 1 || runs[0].ParentID != "parent" {
			t.Fatalf("RunList = %+v, %v; want child-1 with its parent", runs, err)
		}
		// Nobody holds the child: it is claimed like any run.
		got := f.runClaim(engine2, 10)
		if len(got) != 1 || got[0].Run.ID != "child-1" || got[0].Run.ParentID != "parent" {
			t.Fatalf("RunClaim = %+v, want child-1 with its parent", got)
		}

		// An existing child is not created again; ChildStarted is appended.
		events = f.advance(parent, store.RunAdvanceParams{Children: []store.ChildSpec{{
			Position: 2, ID: "child-1", Workflow: "other", Input: json.RawMessage(`{}`),
		}}})
		if len(events) != 1 || events[0].Type != store.EventChildStarted || events[0].Position != 2 {
			t.Fatalf("events = %s, want ChildStarted at position 2", dump(events))
		}
		if n := len(f.history("child-1")); n != 1 || f.get("child-1").Workflow != "refund" {
			t.Fatalf("existing child changed: %d events, %+v", n, f.get("child-1"))
		}
	})

	t.Run("ChildKeepsItsTraceParent", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		parent := f.create("parent")
		f.advance(parent, store.RunAdvanceParams{Children: []store.ChildSpec{
			{Position: 1, ID: "traced", Workflow: "refund", TraceParent: tp},
			{Position: 2, ID: "plain", Workflow: "refund"},
		}})
		if got := f.get("traced").TraceParent; got != tp {
			t.Fatalf("RunGet: TraceParent = %q, want %q", got, tp)
		}
		if got := f.get("plain").TraceParent; got != "" {
			t.Fatalf("RunGet of a child given none: TraceParent = %q, want none", got)
		}
		got := map[string]string{}
		for _, l := range f.runClaim(engine2, 10) {
			got[l.Run.ID] = l.Run.TraceParent
		}
		if len(got) != 2 || got["traced"] != tp || got["plain"] != "" {
			t.Fatalf("RunClaim: trace parents %q, want traced's %q and none for plain", got, tp)
		}
	})

	t.Run("RunCreateKeepsTheParent", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease, _, err := f.store.RunCreate(t.Context(), &store.RunCreateParams{
			ID: "child", Workflow: "refund", Input: json.RawMessage(`{}`),
			ParentID: "parent", ParentPosition: 3, ParentExecution: 1,
		})
		if err != nil {
			t.Fatalf("RunCreate: %v", err)
		}
		if lease.Run.ParentID != "parent" || f.get("child").ParentID != "parent" {
			t.Fatalf("ParentID = %q, RunGet's %q; want parent", lease.Run.ParentID, f.get("child").ParentID)
		}
		if f.get("child").ParentID != "parent" {
			t.Fatal("RunGet lost the parent")
		}
		if f.create("plain"); f.get("plain").ParentID != "" {
			t.Fatalf("ParentID = %q for a run without a parent", f.get("plain").ParentID)
		}
	})

	t.Run("ChildEndIsAppendedToTheParent", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		parent := f.create("parent")
		done := f.startChildRun(parent, 1, "done")
		failed := f.startChildRun(parent, 2, "failed")
		gaveUp := f.startChildRun(parent, 3, "gave-up")
		f.clock.Advance(time.Second)
		now := f.now()

		output := json.RawMessage(`{"refunded":5}`)
		adv := f.advanced(done, store.RunAdvanceParams{Finish: &store.RunFinish{Status: store.RunCompleted, Output: output}})
		want := []store.Event{{Seq: 5, Type: store.EventChildCompleted, At: now, Execution: 1, Position: 1, Child: "done", Output: output}}
		if adv.Parent == nil || adv.Parent.RunID != "parent" || adv.Parent.Owner != engine {
			t.Fatalf("Advanced.Parent = %+v, want parent owned by %s", adv.Parent, engine)
		}
		requireEvents(t, adv.Parent.Events, want)
		requireEvents(t, f.last("parent", 1), want)

		runErr := &store.ErrorInfo{Type: "Declined", Message: "no"}
		adv = f.advanced(failed, store.RunAdvanceParams{Finish: &store.RunFinish{Status: store.RunFailed, Error: runErr}})
		want = []store.Event{{Seq: 6, Type: store.EventChildFailed, At: now, Execution: 1, Position: 2, Child: "failed", Error: runErr, ChildStatus: "failed"}}
		requireEvents(t, adv.Parent.Events, want)

		adv = f.advanced(gaveUp, store.RunAdvanceParams{Finish: &store.RunFinish{Status: store.RunCancelled, Error: runErr}})
		want = []store.Event{{Seq: 7, Type: store.EventChildFailed, At: now, Execution: 1, Position: 3, Child: "gave-up", Error: runErr, ChildStatus: "cancelled"}}
		requireEvents(t, adv.Parent.Events, want)
		requireEvents(t, f.last("parent", 1), want)
	})

	t.Run("CancelledChildIsAppendedToTheParent", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		parent := f.create("parent")
		f.startChildRun(parent, 1, "child")
		f.clock.Advance(time.Second)
		if _, err := f.store.RunCancel(t.Context(), &store.RunCancelParams{ID: "child", Reason: "operator"}); err != nil {
			t.Fatalf("RunCancel: %v", err)
		}
		requireEvents(t, f.last("parent", 1), []store.Event{{
			Seq: 3, Type: store.EventChildFailed, At: f.now(), Execution: 1, Position: 1, Child: "child", ChildStatus: "cancelled",
		}})
	})

	t.Run("ParentNotToldOnceFinishedOrInAnotherExecution", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		// A child of execution 1 of a parent now in execution 2.
		moved := f.create("moved")
		f.advance(moved, store.RunAdvanceParams{Finish: &store.RunFinish{ContinueAsNew: true, Input: json.RawMessage(`{}`)}})
		// A child of a parent that finished.
		ended := f.create("ended")
		f.advance(ended, store.RunAdvanceParams{Finish: &store.RunFinish{Status: store.RunCompleted}})
		for _, parent := range []string{"moved", "ended"} {
			child, _, err := f.store.RunCreate(t.Context(), &store.RunCreateParams{
				ID: "child-of-" + parent, Workflow: "refund", Input: json.RawMessage(`{}`), Owner: engine2, LeaseTTL: minute,
				ParentID: parent, ParentPosition: 1, ParentExecution: 1,
			})
			if err != nil {
				t.Fatalf("RunCreate: %v", err)
			}
			before := f.history(parent)
			adv := f.advanced(child, store.RunAdvanceParams{Finish: &store.RunFinish{Status: store.RunCompleted}})
			if adv.Parent != nil {
				t.Fatalf("Advanced.Parent = %+v for a parent that moved on", adv.Parent)
			}
			requireEvents(t, f.history(parent), before)
		}
	})

	t.Run("EndingRunCancelsActiveChildrenRecursively", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		parent := f.create("parent")
		child := f.startChildRun(parent, 1, "child")
		f.advance(child, store.RunAdvanceParams{Steps: []store.StepSpec{newStep(1, "refund")}})
		running := f.claimOne("refund")
		f.advance(child, store.RunAdvanceParams{Children: []store.ChildSpec{{Position: 2, ID: "grandchild", Workflow: "audit"}}})
		done := f.startChildRun(parent, 2, "done")
		f.advance(done, store.RunAdvanceParams{Finish: &store.RunFinish{Status: store.RunCompleted}})
		doneHistory := f.history("done")
		f.clock.Advance(time.Second)
		now := f.now()

		adv := f.advanced(parent, store.RunAdvanceParams{Finish: &store.RunFinish{Status: store.RunCompleted}})
		if len(adv.Events) != 1 || adv.Events[0].Type != store.EventRunCompleted {
			t.Fatalf("events = %s, want RunCompleted alone", dump(adv.Events))
		}
		if last := f.last("parent", 1)[0]; last.Type != store.EventRunCompleted {
			t.Fatalf("parent's last event = %s, want RunCompleted", dump([]store.Event{last}))
		}
		for id, reason := range map[string]string{"child": "parent finished", "grandchild": "parent cancelled"} {
			if run := f.get(id); run.Status != store.RunCancelled {
				t.Fatalf("%s is %s, want cancelled", id, run.Status)
			}
			got := f.last(id, 1)[0]
			if got.Type != store.EventRunCancelled || got.Reason != reason || !got.At.Equal(now) || got.Execution != 1 {
				t.Fatalf("%s's last event = %s, want RunCancelled{%q}", id, dump([]store.Event{got}), reason)
			}
		}
		requireDescendants(t, adv.Descendants, map[string]string{"child": "parent", "grandchild": "child"})
		requireEvents(t, f.history("done"), doneHistory)
		requireErr(t, func() error {
			_, err := f.store.TaskComplete(t.Context(), &store.TaskCompleteParams{TaskID: running.ID, Token: running.Token})
			return err
		}(), store.ErrLeaseLost)
	})

	t.Run("CancellingRunCancelsItsChildren", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		parent := f.create("parent")
		f.startChildRun(parent, 1, "child")
		c, err := f.store.RunCancel(t.Context(), &store.RunCancelParams{ID: "parent", Reason: "operator"})
		if err != nil {
			t.Fatalf("RunCancel: %v", err)
		}
		if c.Run.ID != "parent" || c.Run.Status != store.RunCancelled {
			t.Fatalf("RunCancel returned run %+v, want parent, cancelled", c.Run)
		}
		requireDescendants(t, c.Descendants, map[string]string{"child": "parent"})
		got := f.last("child", 1)[0]
		if got.Type != store.EventRunCancelled || got.Reason != "parent cancelled" {
			t.Fatalf("child's last event = %s, want RunCancelled{parent cancelled}", dump([]store.Event{got}))
		}
		if last := f.last("parent", 1)[0]; last.Type != store.EventRunCancelled || last.Reason != "operator" {
			t.Fatalf("parent's last event = %s, want its own RunCancelled", dump([]store.Event{last}))
		}
	})
	t.Run("ContinueAsNewCancelsActiveChildren", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		parent := f.create("parent")
		f.startChildRun(parent, 1, "child")
		adv := f.advanced(parent, store.RunAdvanceParams{Finish: &store.RunFinish{ContinueAsNew: true, Input: json.RawMessage(`{}`)}})
		requireDescendants(t, adv.Descendants, map[string]string{"child": "parent"})
		if run := f.get("child"); run.Status != store.RunCancelled {
			t.Fatalf("child is %s, want cancelled", run.Status)
		}
	})
}

// requireDescendants checks the runs a store call cancelled below the run it
// ended, in any order: their ids, each with its parent's, all cancelled.
func requireDescendants(t *testing.T, got []*store.Run, want map[string]string) {
	t.Helper()
	ids := map[string]string{}
	for _, r := range got {
		if r.Status != store.RunCancelled {
			t.Errorf("descendant %s is %s, want cancelled", r.ID, r.Status)
		}
		ids[r.ID] = r.ParentID
	}
	if !maps.Equal(ids, want) {
		t.Fatalf("descendants (id: parent) = %v, want %v", ids, want)
	}
}
