package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"reprise/store"
)

// failAttempt fails the task's attempt for good.
func (f *fixture) failAttempt(task *store.Task) {
	f.t.Helper()
	_, err := f.store.TaskFail(f.t.Context(), &store.TaskFailParams{
		TaskID: task.ID, Token: task.Token, Attempt: task.Attempt, Error: store.ErrorInfo{Type: "Declined", Message: "card declined"},
		Rule: "[retry: 1]", Reason: "exhausted",
	})
	if err != nil {
		f.t.Fatalf("TaskFail(%d): %v", task.ID, err)
	}
}

// failRun finishes the run as failed.
func (f *fixture) failRun(lease store.RunLease) {
	f.t.Helper()
	f.advance(lease, store.RunAdvanceParams{Finish: &store.RunFinish{
		Status: store.RunFailed, Error: &store.ErrorInfo{Type: "StepFailed", Message: "charge failed"},
	}})
}

func testRedrive(t *testing.T, open Open) {
	redrive := func(f *fixture, id string) (*store.Run, error) {
		return f.store.RunRedrive(f.t.Context(), &store.RunRedriveParams{ID: id, By: "operator"})
	}

	t.Run("MakesTheFailedStepReadyWithAFreshBudget", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		s := withTimeout(newStep(1, "charge"), time.Hour)
		lease := f.schedule("run-1", s, newStep(2, "ship"))
		f.complete(f.claimOne("ship"))
		f.retry(f.claimOne("charge"), 0)
		f.failAttempt(f.claimOne("charge"))
		f.failRun(lease)
		f.clock.Advance(time.Second)
		now := f.now()

		run, err := redrive(f, "run-1")
		if err != nil {
			t.Fatalf("RunRedrive: %v", err)
		}
		if run.Status != store.RunRunning || run.Error != nil || run.Output != nil {
			t.Fatalf("redriven run = %+v, want running without an error", run)
		}
		requireTime(t, "UpdatedAt", run.UpdatedAt, now)
		requireEvents(t, f.last("run-1", 1), []store.Event{{
			Seq: 12, Type: store.EventRunRedriven, At: now, Execution: 1, Position: 1, Step: "charge", By: "operator",
		}})
		// Nobody holds the run: it waits for any engine.
		if got := f.runClaim(engine2, 10); len(got) != 1 || got[0].Run.ID != "run-1" {
			t.Fatalf("RunClaim = %v, want run-1", leaseIDs(got))
		}

		task := f.claimOne("charge")
		if task.Position != 1 || task.Execution != 1 || task.IdempotencyKey != s.IdempotencyKey || task.Timeout != time.Hour ||
			task.Attempt != 3 || task.Base != 2 || task.Lapses != 0 {
			t.Fatalf("redriven task = %+v, want attempt 3 over base 2", task)
		}
		requireJSON(t, "Input", task.Input, s.Input)
		requireJSON(t, "Policy", task.Policy, s.Policy)
		if e := f.last("run-1", 1)[0]; e.Type != store.EventAttemptStarted || e.Attempt != 3 {
			t.Fatalf("last event = %s, want AttemptStarted of attempt 3", dump([]store.Event{e}))
		}
		f.complete(task)
	})

	t.Run("NotRedrivable", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		_, err := redrive(f, "missing")
		requireErr(t, err, store.ErrNotFound)

		// Active, completed, and failed without a failed step.
		f.schedule("active", newStep(1, "charge"))
		f.failAttempt(f.claimOne("charge"))
		completed := f.create("completed")
		f.advance(completed, store.RunAdvanceParams{Finish: &store.RunFinish{Status: store.RunCompleted}})
		f.failRun(f.create("failed"))
		// Failed after a later step completed.
		later := f.schedule("later", newStep(1, "email"), newStep(2, "sms"))
		f.failAttempt(f.claimOne("email"))
		f.complete(f.claimOne("sms"))
		f.failRun(later)
		// The same, with the later step's result recorded by the write that
		// failed the run: StepCompleted is not the last event of that write.
		handed := f.schedule("handed", newStep(1, "post"), newStep(2, "page"))
		f.failAttempt(f.claimOne("post"))
		page := f.claimOne("page")
		f.advance(handed, store.RunAdvanceParams{
			Completed: []store.TaskCompleteParams{{TaskID: page.ID, Token: page.Token, Output: json.RawMessage(`1`)}},
			Finish:    &store.RunFinish{Status: store.RunFailed, Error: &store.ErrorInfo{Type: "StepFailed", Message: "post failed"}},
		})
		// Failed in an execution after the one whose step failed.
		moved := f.schedule("moved", newStep(1, "fax"))
		f.failAttempt(f.claimOne("fax"))
		f.advance(moved, store.RunAdvanceParams{Finish: &store.RunFinish{ContinueAsNew: true, Input: json.RawMessage(`{}`)}})
		f.failRun(moved)

		for _, id := range []string{"active", "completed", "failed", "later", "handed", "moved"} {
			f.requireChangedNothing(id, store.ErrNotRedrivable, func() error {
				_, err := redrive(f, id)
				return err
			})
		}
		f.claimNone("charge")
		f.claimNone("email")
		f.claimNone("post")
		f.claimNone("fax")
	})
}

func testSignals(t *testing.T, open Open) {
	t.Run("AppendsToTheCurrentExecution", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease := f.create("run-1")
		f.advance(lease, store.RunAdvanceParams{Finish: &store.RunFinish{ContinueAsNew: true, Input: json.RawMessage(`{}`)}})
		f.clock.Advance(time.Second)
		payload := json.RawMessage(`{"approved":true}`)
		out, err := f.store.SignalSend(t.Context(), &store.SignalSendParams{RunID: "run-1", Name: "approve", Payload: payload})
		if err != nil {
			t.Fatalf("SignalSend: %v", err)
		}
		want := []store.Event{{Seq: 4, Type: store.EventSignalReceived, At: f.now(), Execution: 2, Signal: "approve", Input: payload}}
		if out.RunID != "run-1" || out.Owner != engine {
			t.Fatalf("Outcome = %+v, want run-1 owned by %s", out, engine)
		}
		requireEvents(t, out.Events, want)
		requireEvents(t, f.last("run-1", 1), want)

		// A pending run nobody holds takes signals too.
		if _, _, err := f.store.RunCreate(t.Context(), &store.RunCreateParams{ID: "free", Workflow: "order"}); err != nil {
			t.Fatalf("RunCreate: %v", err)
		}
		out, err = f.store.SignalSend(t.Context(), &store.SignalSendParams{RunID: "free", Name: "go"})
		if err != nil || out.Owner != "" || len(out.Events) != 1 || out.Events[0].Seq != 2 {
			t.Fatalf("SignalSend = %+v, %v; want SignalReceived at seq 2, no owner", out, err)
		}
	})

	t.Run("FinishedOrMissingRun", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		_, err := f.store.SignalSend(t.Context(), &store.SignalSendParams{RunID: "missing", Name: "approve"})
		requireErr(t, err, store.ErrNotFound)
		lease := f.create("run-1")
		f.advance(lease, store.RunAdvanceParams{Finish: &store.RunFinish{Status: store.RunCompleted}})
		f.requireChangedNothing("run-1", store.ErrRunFinished, func() error {
			_, err := f.store.SignalSend(t.Context(), &store.SignalSendParams{RunID: "run-1", Name: "approve"})
			return err
		})
	})
}
