package postgres_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"reprise/postgres"
	"reprise/store"
)

// TestTaskFailLeaseNext has TaskFail start the next attempt at once: the
// task comes back leased as TaskClaim would lease it, AttemptStarted
// follows AttemptFailed, the old token is stale, and no task_ready notice
// is sent.
func TestTaskFailLeaseNext(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s := openStore(t, clock.Now)
	ctx := t.Context()
	notices := listen(t, s)
	awaitResync(t, notices)

	lease, _, err := s.RunCreate(ctx, &store.RunCreateParams{ID: "r1", Workflow: "wf", Owner: "e1", LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	must[*store.Advanced](t)(s.RunAdvance(ctx, &store.RunAdvanceParams{
		RunID: "r1", Token: lease.Token,
		Steps: []store.StepSpec{{
			Position: 1, Name: "charge", Input: json.RawMessage(`"x"`), IdempotencyKey: "k1",
			PolicyText: "[retry: 3]", Policy: json.RawMessage(`{"max":3}`), Timeout: 10 * time.Second,
		}},
	}))
	if n := next(t, notices); n.Kind != postgres.NoticeTaskReady {
		t.Fatalf("notice = %+v, want task_ready", n)
	}
	claim := func() []*store.Task {
		return must[[]*store.Task](t)(s.TaskClaim(ctx, &store.TaskClaimParams{
			Owner: "w1", Steps: []store.StepQuota{{Name: "charge", Limit: 5}}, LeaseTTL: time.Minute,
		}))
	}
	first := claim()[0]
	clock.Add(time.Second)

	fail := func(p store.TaskFailParams) (*store.Outcome, error) {
		p.Error = store.ErrorInfo{Type: "NetworkError", Message: "down"}
		p.Rule = "[retry: 3]"
		return s.TaskFail(ctx, &p)
	}
	// A LeaseNext the store cannot honour is refused, and nothing written.
	for _, p := range []store.TaskFailParams{
		{TaskID: first.ID, Token: first.Token, Retry: true, LeaseNext: true, LeaseTTL: time.Minute},
		{TaskID: first.ID, Token: first.Token, Retry: true, LeaseNext: true, LeaseOwner: "w2"},
	} {
		if _, err := fail(p); err == nil || errors.Is(err, store.ErrLeaseLost) {
			t.Errorf("fail with %+v: %v, want a parameter error", p, err)
		}
	}
	if got := must[*store.Task](t)(s.TaskGet(ctx, first.ID)); !reflect.DeepEqual(got, asRead(first)) {
		t.Fatalf("task after refused fails = %+v, want %+v", got, first)
	}

	o := must[*store.Outcome](t)(fail(store.TaskFailParams{
		TaskID: first.ID, Token: first.Token, Retry: true, LeaseNext: true, LeaseOwner: "w2", LeaseTTL: time.Hour,
	}))
	if types(o.Events) != "AttemptFailed AttemptStarted" || o.Next == nil {
		t.Fatalf("outcome = %+v", o)
	}
	n := o.Next
	now := clock.Now()
	if n.Attempt != 2 || n.Token == first.Token || !n.StartedAt.Equal(now) || !n.FirstStartedAt.Equal(first.StartedAt) ||
		!n.LeaseUntil.Equal(now.Add(10*time.Second)) || n.Lapses != 0 {
		t.Errorf("next = %+v", n)
	}
	if got := must[*store.Task](t)(s.TaskGet(ctx, first.ID)); !reflect.DeepEqual(got, asRead(n)) {
		t.Errorf("stored task = %+v\nnext        = %+v", got, n)
	}
	started := o.Events[1]
	want := store.Event{
		Type: store.EventAttemptStarted, Seq: o.Events[0].Seq + 1, At: now, Execution: 1, Position: 1, Step: "charge",
		Attempt: 2, Worker: "w2", LeaseUntil: n.LeaseUntil, IdempotencyKey: "k1",
	}
	if !reflect.DeepEqual(started, want) {
		t.Errorf("AttemptStarted = %+v\nwant             %+v", started, want)
	}
	if len(claim()) != 0 {
		t.Error("claimed a task leased at once")
	}
	if _, err := s.TaskComplete(ctx, &store.TaskCompleteParams{TaskID: first.ID, Token: first.Token}); !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("complete with the old token: %v", err)
	}

	// With a delay, LeaseNext is ignored: the task waits out its backoff.
	o = must[*store.Outcome](t)(fail(store.TaskFailParams{
		TaskID: n.ID, Token: n.Token, Retry: true, Delay: time.Second, LeaseNext: true, LeaseOwner: "w2", LeaseTTL: time.Hour,
	}))
	if types(o.Events) != "AttemptFailed" || o.Next != nil {
		t.Fatalf("outcome with a delay = %+v", o)
	}
	if got := next(t, notices); got.Kind != postgres.NoticeTaskReady {
		t.Fatalf("notice = %+v, want the delayed retry's task_ready", got)
	}
	clock.Add(time.Second)
	third := claim()[0]
	// Without a retry too: the step fails.
	o = must[*store.Outcome](t)(fail(store.TaskFailParams{
		TaskID: third.ID, Token: third.Token, Reason: "out of retries", LeaseNext: true, LeaseOwner: "w2", LeaseTTL: time.Hour,
	}))
	if types(o.Events) != "AttemptFailed StepFailed" || o.Next != nil {
		t.Fatalf("outcome without a retry = %+v", o)
	}
	// The leased-at-once attempt sent no task_ready: the next notice is
	// the step's failure.
	if got := next(t, notices); got.Kind != postgres.NoticeOutcome {
		t.Fatalf("notice = %+v, want the outcome", got)
	}
	history := must[[]store.Event](t)(s.HistoryList(ctx, &store.HistoryListParams{RunID: "r1"}))
	if got, want := types(history), "RunStarted StepScheduled AttemptStarted AttemptFailed AttemptStarted AttemptFailed AttemptStarted AttemptFailed StepFailed"; got != want {
		t.Errorf("history = %s\nwant      %s", got, want)
	}
}

// TestTaskFailLeaseNextAfterLapse leases the next attempt from the reaper's
// TaskFail: the lapse is counted as a plain retry counts it, and the lease
// is the TTL when the step has no timeout.
func TestTaskFailLeaseNextAfterLapse(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s := openStore(t, clock.Now)
	ctx := t.Context()
	task := claimedTask(t, s, store.StepSpec{Position: 1, Name: "s", IdempotencyKey: "k"})
	clock.Add(2 * time.Minute)
	o := must[*store.Outcome](t)(s.TaskFail(ctx, &store.TaskFailParams{
		TaskID: task.ID, Token: task.Token, Retry: true, Expired: true,
		LeaseNext: true, LeaseOwner: "w2", LeaseTTL: 30 * time.Second,
	}))
	n := o.Next
	if n == nil || n.Lapses != 1 || n.Attempt != 2 || !n.LeaseUntil.Equal(clock.Now().Add(30*time.Second)) {
		t.Fatalf("next = %+v", n)
	}
	if got := must[*store.Task](t)(s.TaskGet(ctx, task.ID)); !reflect.DeepEqual(got, asRead(n)) {
		t.Errorf("stored task = %+v\nnext        = %+v", got, n)
	}
}

// claimedTask schedules step in a new run r1 and returns its task, claimed
// by w1 for a minute.
func claimedTask(t *testing.T, s *postgres.Store, step store.StepSpec) *store.Task {
	t.Helper()
	ctx := t.Context()
	lease, _, err := s.RunCreate(ctx, &store.RunCreateParams{ID: "r1", Workflow: "wf", Owner: "e1", LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	must[*store.Advanced](t)(s.RunAdvance(ctx, &store.RunAdvanceParams{RunID: "r1", Token: lease.Token, Steps: []store.StepSpec{step}}))
	return must[[]*store.Task](t)(s.TaskClaim(ctx, &store.TaskClaimParams{
		Owner: "w1", Steps: []store.StepQuota{{Name: step.Name, Limit: 1}}, LeaseTTL: time.Minute,
	}))[0]
}

// TestRetryInPlaceLeavesTheTaskRow: a retry at once by the lease's owner,
// which keeps its lease, writes its events and not the task's row; the
// next attempt keeps the token. A retry leased to another owner writes
// the row as a claim would.
func TestRetryInPlaceLeavesTheTaskRow(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s := openStore(t, clock.Now)
	ctx := t.Context()
	task := claimedTask(t, s, store.StepSpec{Position: 1, Name: "charge", IdempotencyKey: "k1", PolicyText: "[retry: 9]", Policy: json.RawMessage(`{}`)})
	version := func() string { return must[string](t)(postgres.TaskRowVersion(ctx, s, task.ID)) }
	retry := func(task *store.Task, owner string) *store.Task {
		clock.Add(time.Second)
		return must[*store.Outcome](t)(s.TaskFail(ctx, &store.TaskFailParams{
			TaskID: task.ID, Token: task.Token, Attempt: task.Attempt, Error: store.ErrorInfo{Type: "E"}, Retry: true,
			LeaseNext: true, LeaseOwner: owner, LeaseTTL: time.Minute,
		})).Next
	}

	before := version()
	n := retry(task, "w1")
	if n.Attempt != 2 || n.Token != task.Token || version() != before {
		t.Fatalf("retry in place: next %+v (token before %d), row version %s then %s; want attempt 2, the same token and row",
			n, task.Token, before, version())
	}
	n = retry(n, "w2")
	if n.Attempt != 3 || n.Token == task.Token || version() == before {
		t.Fatalf("retry leased to another owner: next %+v, row version %s then %s; want attempt 3, a new token and row",
			n, before, version())
	}
	if got := must[*store.Task](t)(s.TaskGet(ctx, task.ID)); !reflect.DeepEqual(got, asRead(n)) {
		t.Errorf("stored task = %+v\nnext        = %+v", got, n)
	}
}

// asRead returns t as TaskGet reads it: without the ReadyAt that only a
// start carries.
func asRead(t *store.Task) *store.Task {
	c := *t
	c.ReadyAt = time.Time{}
	return &c
}
