package storetest

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"reprise/store"
)

// leaseNextParams retries the task's attempt at once, leasing the next
// attempt to owner for ttl.
func leaseNextParams(task *store.Task, owner string, ttl time.Duration) *store.TaskFailParams {
	p := retryParams(task, 0)
	p.LeaseNext, p.LeaseOwner, p.LeaseTTL = true, owner, ttl
	return p
}

// retryLeased retries the task's attempt at once, leasing the next attempt
// to owner for ttl, and returns the outcome.
func (f *fixture) retryLeased(task *store.Task, owner string, ttl time.Duration) *store.Outcome {
	f.t.Helper()
	out, err := f.store.TaskFail(f.t.Context(), leaseNextParams(task, owner, ttl))
	if err != nil {
		f.t.Fatalf("TaskFail(%d, LeaseNext): %v", task.ID, err)
	}
	return out
}

func testTaskFailLeaseNext(t *testing.T, open Open) {
	netErr := store.ErrorInfo{Type: "NetworkError", Message: "connection reset"}

	t.Run("StartsTheNextAttemptAsAClaimWould", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		s := withTimeout(newStep(1, "charge"), time.Hour)
		f.schedule("run-1", s)
		first := f.claimOne("charge")
		f.clock.Advance(time.Second)
		now := f.now()

		out := f.retryLeased(first, worker2, minute)
		want := []store.Event{
			{
				Seq: 4, Type: store.EventAttemptFailed, At: now, Execution: 1,
				Position: 1, Step: "charge", Attempt: 1, Error: &netErr,
				RetryAt: now, Rule: "[retry: 3, backoff: 1s]",
			},
			{
				Seq: 5, Type: store.EventAttemptStarted, At: now, Execution: 1,
				Position: 1, Step: "charge", Attempt: 2, Worker: worker2,
				LeaseUntil: now.Add(minute), IdempotencyKey: s.IdempotencyKey,
			},
		}
		if out.RunID != "run-1" || out.Owner != engine {
			t.Fatalf("Outcome = %+v, want run-1 owned by %s", out, engine)
		}
		requireEvents(t, out.Events, want)
		requireEvents(t, f.history("run-1")[3:], want)

		next := out.Next
		if next == nil {
			t.Fatal("Outcome.Next = nil, want the next attempt")
		}
		if next.Token == 0 || next.Token == first.Token {
			t.Fatalf("Next.Token = %d, want a new token (old %d)", next.Token, first.Token)
		}
		wantTask := *first
		wantTask.Attempt, wantTask.Token, wantTask.Owner = 2, next.Token, worker2
		wantTask.StartedAt, wantTask.LeaseUntil = now, now.Add(minute)
		if !reflect.DeepEqual(normTask(next), normTask(&wantTask)) {
			t.Fatalf("Outcome.Next = %+v, want %+v", next, wantTask)
		}
		requireTime(t, "Next.ReadyAt", next.ReadyAt, now)
		stored, err := f.store.TaskGet(t.Context(), next.ID)
		if err != nil {
			t.Fatalf("TaskGet: %v", err)
		}
		if !reflect.DeepEqual(normTask(stored), normTask(next)) {
			t.Fatalf("TaskGet = %+v, want Outcome.Next %+v", stored, next)
		}
		requireWake(f, nil, store.Wake{Lease: now.Add(minute)})

		// Leased, the task cannot be claimed, up to the lease's last instant.
		f.claimNone("charge")
		f.clock.Advance(minute - time.Microsecond)
		f.claimNone("charge")

		// The failed attempt's token is fenced off.
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.TaskComplete(t.Context(), &store.TaskCompleteParams{TaskID: first.ID, Token: first.Token})
			return err
		})
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.TaskHeartbeat(t.Context(), &store.TaskHeartbeatParams{TaskID: first.ID, Token: first.Token, LeaseTTL: minute})
			return err
		})
		f.requireChangedNothing("run-1", store.ErrLeaseLost, func() error {
			_, err := f.store.TaskFail(t.Context(), leaseNextParams(first, worker, minute))
			return err
		})

		// The new one completes the step.
		done := f.complete(next)
		if len(done.Events) != 1 || done.Events[0].Type != store.EventStepCompleted || done.Events[0].Attempt != 2 {
			t.Fatalf("TaskComplete events = %s, want StepCompleted of attempt 2", dump(done.Events))
		}
		f.clock.Advance(time.Hour)
		f.claimNone("charge")
	})

	t.Run("LeaseIsCutToTimeout", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", withTimeout(newStep(1, "charge"), 10*time.Second))
		first := f.claimOne("charge")
		f.clock.Advance(3 * time.Second)
		now := f.now()

		next := f.retryLeased(first, worker, minute).Next
		if next == nil {
			t.Fatal("Outcome.Next = nil, want the next attempt")
		}
		requireTime(t, "LeaseUntil", next.LeaseUntil, now.Add(10*time.Second))
		requireTime(t, "AttemptStarted.LeaseUntil", f.last("run-1", 1)[0].LeaseUntil, now.Add(10*time.Second))
		// The new attempt's timeout runs from its own start.
		f.clock.Advance(5 * time.Second)
		until, err := f.store.TaskHeartbeat(t.Context(), &store.TaskHeartbeatParams{TaskID: next.ID, Token: next.Token, LeaseTTL: minute})
		if err != nil {
			t.Fatalf("TaskHeartbeat: %v", err)
		}
		requireTime(t, "heartbeat LeaseUntil", until, now.Add(10*time.Second))
		f.clock.Advance(5 * time.Second)
		expired, err := f.store.TaskListExpired(t.Context(), &store.TaskListExpiredParams{})
		if err != nil {
			t.Fatalf("TaskListExpired: %v", err)
		}
		if len(expired) != 1 || expired[0].ID != next.ID || expired[0].Token != next.Token || expired[0].Attempt != 2 {
			t.Fatalf("TaskListExpired = %+v, want the leased attempt 2", expired)
		}
	})

	t.Run("IgnoredWithADelayOrWithoutRetry", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", newStep(1, "charge"))
		first := f.claimOne("charge")
		now := f.now()
		p := leaseNextParams(first, worker, minute)
		p.Delay = 10 * time.Second
		out, err := f.store.TaskFail(t.Context(), p)
		if err != nil {
			t.Fatalf("TaskFail(LeaseNext, Delay): %v", err)
		}
		if out.Next != nil {
			t.Fatalf("Outcome.Next = %+v with a delay, want nil", out.Next)
		}
		requireEvents(t, out.Events, []store.Event{{
			Seq: 4, Type: store.EventAttemptFailed, At: now, Execution: 1,
			Position: 1, Step: "charge", Attempt: 1, Error: &netErr,
			Delay: 10 * time.Second, RetryAt: now.Add(10 * time.Second), Rule: "[retry: 3, backoff: 1s]",
		}})
		requireWake(f, nil, store.Wake{Task: now.Add(10 * time.Second)})
		f.claimNone("charge")
		f.clock.Advance(10 * time.Second)
		second := f.claimOne("charge")
		if second.Attempt != 2 {
			t.Fatalf("claimed attempt %d, want 2", second.Attempt)
		}

		p = leaseNextParams(second, worker, minute)
		p.Retry, p.Reason = false, "exhausted"
		out, err = f.store.TaskFail(t.Context(), p)
		if err != nil {
			t.Fatalf("TaskFail(LeaseNext, no Retry): %v", err)
		}
		if out.Next != nil {
			t.Fatalf("Outcome.Next = %+v without Retry, want nil", out.Next)
		}
		if len(out.Events) != 2 || out.Events[1].Type != store.EventStepFailed {
			t.Fatalf("events = %s, want AttemptFailed, StepFailed", dump(out.Events))
		}
		f.clock.Advance(time.Hour)
		f.claimNone("charge")
	})

	t.Run("WithoutOwnerOrTTLIsAnError", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", newStep(1, "charge"))
		first := f.claimOne("charge")
		for _, p := range []*store.TaskFailParams{
			leaseNextParams(first, "", minute),
			leaseNextParams(first, worker, 0),
			leaseNextParams(first, worker, -minute),
		} {
			before := f.history("run-1")
			out, err := f.store.TaskFail(t.Context(), p)
			if err == nil {
				t.Fatalf("TaskFail(LeaseOwner %q, LeaseTTL %v) = %+v, want an error", p.LeaseOwner, p.LeaseTTL, out)
			}
			requireEvents(t, f.history("run-1"), before)
			got, err := f.store.TaskGet(t.Context(), first.ID)
			if err != nil {
				t.Fatalf("TaskGet: %v", err)
			}
			if !reflect.DeepEqual(normTask(got), normTask(first)) {
				t.Fatalf("task changed by a rejected TaskFail: %+v, want %+v", got, first)
			}
		}
		// The attempt's lease still holds.
		f.complete(first)
	})

	t.Run("LapsesCountAsTaskFailCounts", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", newStep(1, "charge"))
		task := f.claimOne("charge")
		// The reaper retries a lapsed lease at once: the count goes up.
		f.clock.Advance(minute)
		p := leaseNextParams(task, worker, minute)
		p.Expired = true
		out, err := f.store.TaskFail(t.Context(), p)
		if err != nil {
			t.Fatalf("TaskFail(Expired, LeaseNext): %v", err)
		}
		if out.Next == nil || out.Next.Lapses != 1 || out.Next.Attempt != 2 {
			t.Fatalf("Outcome.Next = %+v, want attempt 2 with Lapses 1", out.Next)
		}
		// A reported failure resets it.
		next := f.retryLeased(out.Next, worker, minute).Next
		if next == nil || next.Lapses != 0 || next.Attempt != 3 {
			t.Fatalf("Outcome.Next = %+v, want attempt 3 with Lapses 0", next)
		}
		if got, err := f.store.TaskGet(t.Context(), next.ID); err != nil || got.Lapses != 0 {
			t.Fatalf("TaskGet = %+v, %v: want Lapses 0", got, err)
		}
		f.complete(next)
	})

	// A retry at once of a step without a timeout keeps its owner's lease
	// while half its TTL is left, and then its token too (TaskFailParams.
	// Next); with less left, or for another owner, it gets a lease and a
	// token of its own.
	t.Run("KeepsTheSameOwnersLeaseWhileHalfIsLeft", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", newStep(1, "charge"))
		task := f.claim(worker, "charge", 1, minute)[0]
		for _, c := range []struct {
			wait  time.Duration
			owner string
			kept  bool
		}{
			{10 * time.Second, worker, true},  // 50 s of 60 left
			{25 * time.Second, worker, false}, // 25 s left
			{time.Second, worker2, false},     // another owner's
			{time.Second, worker2, true},      // 59 s left, the new owner's
		} {
			f.clock.Advance(c.wait)
			next := f.retryLeased(task, c.owner, minute).Next
			want := f.now().Add(minute)
			if c.kept {
				want = task.LeaseUntil
			}
			if !next.LeaseUntil.Equal(want) || !next.StartedAt.Equal(f.now()) || next.Owner != c.owner {
				t.Fatalf("after %v, owner %s: next = %+v; want lease until %v, started now", c.wait, c.owner, next, want)
			}
			if (next.Token == task.Token) != c.kept {
				t.Fatalf("after %v, owner %s: token %d then %d; kept = %v", c.wait, c.owner, task.Token, next.Token, c.kept)
			}
			if started := f.last("run-1", 1)[0]; !started.LeaseUntil.Equal(want) || started.Worker != c.owner {
				t.Fatalf("AttemptStarted = %s, want lease until %v", dump([]store.Event{started}), want)
			}
			stored, err := f.store.TaskGet(t.Context(), task.ID)
			if err != nil {
				t.Fatalf("TaskGet: %v", err)
			}
			if !reflect.DeepEqual(normTask(stored), normTask(next)) {
				t.Fatalf("TaskGet = %+v, want Outcome.Next %+v", stored, next)
			}
			task = next
		}
	})

	t.Run("NeverKeepsALeaseCutToATimeout", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", withTimeout(newStep(1, "charge"), time.Hour))
		first := f.claim(worker, "charge", 1, minute)[0]
		f.clock.Advance(time.Second)
		next := f.retryLeased(first, worker, minute).Next
		if next.Token == first.Token || !next.LeaseUntil.Equal(f.now().Add(minute)) {
			t.Fatalf("next = %+v after %+v, want a new token and lease", next, first)
		}
	})

	// A store may leave the row of an attempt started in place as the
	// claim wrote it. Whatever it does, every reader and every later
	// write must see the attempt the history says.
	t.Run("AttemptsStartedInPlaceCountAsTheHistorySays", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease := f.schedule("run-1", newStep(1, "charge"))
		first := f.claimOne("charge")
		second := f.retryLeased(first, worker, minute).Next
		f.clock.Advance(time.Second)
		started := f.now()
		third := f.retryLeased(second, worker, minute).Next
		if second == nil || third == nil || second.Attempt != 2 || third.Attempt != 3 {
			t.Fatalf("Outcome.Next = %+v then %+v, want attempts 2 and 3", second, third)
		}
		requireTime(t, "StartedAt", third.StartedAt, started)
		if got := f.last("run-1", 1)[0]; got.Type != store.EventAttemptStarted || got.Attempt != 3 {
			t.Fatalf("last event = %s, want AttemptStarted of attempt 3", dump([]store.Event{got}))
		}
		got, err := f.store.TaskGet(t.Context(), third.ID)
		if err != nil {
			t.Fatalf("TaskGet: %v", err)
		}
		if got.Attempt != 3 || got.Token != third.Token || !got.StartedAt.Equal(started) || !got.LeaseUntil.Equal(third.LeaseUntil) {
			t.Fatalf("TaskGet = %+v, want attempt 3 as Outcome.Next %+v", got, third)
		}

		// The lease lapses: the reaper sees attempt 3, and its retry
		// makes attempt 4 the next claim's.
		f.clock.Advance(2 * minute)
		expired, err := f.store.TaskListExpired(t.Context(), &store.TaskListExpiredParams{})
		if err != nil {
			t.Fatalf("TaskListExpired: %v", err)
		}
		if len(expired) != 1 || expired[0].Attempt != 3 || expired[0].Token != third.Token {
			t.Fatalf("TaskListExpired = %+v, want attempt 3 with token %d", expired, third.Token)
		}
		reap := retryParams(expired[0], 0)
		reap.Expired = true
		out, err := f.store.TaskFail(t.Context(), reap)
		if err != nil {
			t.Fatalf("TaskFail(Expired): %v", err)
		}
		if len(out.Events) != 1 || out.Events[0].Attempt != 3 {
			t.Fatalf("reaper's events = %s, want AttemptFailed of attempt 3", dump(out.Events))
		}
		fourth := f.claimOne("charge")
		if fourth.Attempt != 4 {
			t.Fatalf("claimed attempt %d, want 4", fourth.Attempt)
		}

		// The step's result, handed to the workflow, is recorded for the
		// attempt that made it.
		fifth := f.retryLeased(fourth, worker, minute).Next
		sixth := f.retryLeased(fifth, worker, minute).Next
		events := f.advance(lease, store.RunAdvanceParams{Completed: []store.TaskCompleteParams{{
			TaskID: sixth.ID, Token: sixth.Token, Attempt: sixth.Attempt, Output: json.RawMessage(`1`),
		}}})
		if len(events) != 1 || events[0].Type != store.EventStepCompleted || events[0].Attempt != 6 {
			t.Fatalf("advance events = %s, want StepCompleted of attempt 6", dump(events))
		}
	})

	t.Run("AReapOfAnAttemptThatEndedChangesNothing", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		// The reaper read attempt 1 (as if its lease had lapsed), and its
		// holder retried it at once before the reaper wrote: attempt 2
		// runs, perhaps in place under the same token. The reaper's write
		// is about an attempt that has ended.
		f.schedule("run-1", newStep(1, "charge"))
		first := f.claimOne("charge")
		listed := *first
		second := f.retryLeased(first, worker, minute).Next
		if second == nil || second.Attempt != 2 {
			t.Fatalf("Outcome.Next = %+v, want attempt 2", second)
		}
		before := f.history("run-1")
		f.clock.Advance(2 * minute) // attempt 2's lease lapses too
		reap := retryParams(&listed, 0)
		reap.Expired = true
		if _, err := f.store.TaskFail(t.Context(), reap); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("TaskFail(Expired) of attempt 1 after attempt 2 started: %v, want ErrLeaseLost", err)
		}
		requireEvents(t, f.history("run-1"), before)
		// Listed again, attempt 2 is reaped as itself.
		expired := f.expired(10)
		if len(expired) != 1 || expired[0].Attempt != 2 {
			t.Fatalf("TaskListExpired = %+v, want attempt 2", expired)
		}
		reap = retryParams(expired[0], 0)
		reap.Expired = true
		out, err := f.store.TaskFail(t.Context(), reap)
		if err != nil || len(out.Events) != 1 || out.Events[0].Attempt != 2 {
			t.Fatalf("TaskFail(Expired) of attempt 2: %v %s", err, dump(out.Events))
		}
	})

	t.Run("AStepFailedAfterAttemptsInPlaceIsRedrivenFromItsLast", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		lease := f.schedule("run-1", newStep(1, "charge"))
		first := f.claimOne("charge")
		second := f.retryLeased(first, worker, minute).Next
		third := f.retryLeased(second, worker, minute).Next
		f.failAttempt(third)
		if got := f.last("run-1", 1)[0]; got.Type != store.EventStepFailed || got.Attempt != 3 {
			t.Fatalf("last event = %s, want StepFailed of attempt 3", dump([]store.Event{got}))
		}
		f.failRun(lease)
		if _, err := f.store.RunRedrive(t.Context(), &store.RunRedriveParams{ID: "run-1", By: "operator"}); err != nil {
			t.Fatalf("RunRedrive: %v", err)
		}
		task := f.claimOne("charge")
		if task.Attempt != 4 || task.Base != 3 {
			t.Fatalf("redriven task = %+v, want attempt 4 over base 3", task)
		}
		// The completion of an attempt started in place names it.
		done := f.complete(f.retryLeased(task, worker, minute).Next)
		if len(done.Events) != 1 || done.Events[0].Attempt != 5 {
			t.Fatalf("TaskComplete events = %s, want StepCompleted of attempt 5", dump(done.Events))
		}
	})
}
