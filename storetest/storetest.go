// Package storetest is the conformance suite every reprise.Store must pass:
// it pins each behaviour the engine relies on, driving time through a fake
// clock so that no test sleeps.
package storetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"reprise/store"
)

// Open opens an empty store for one test. The store must read its time from
// now, and should be closed by the time t ends (t.Cleanup).
type Open func(t *testing.T, now func() time.Time) store.Store

// Run runs the suite against the stores open returns. Each subtest opens its
// own store, and most run in parallel.
func Run(t *testing.T, open func(t *testing.T, now func() time.Time) store.Store) {
	t.Run("RunCreate", func(t *testing.T) { t.Parallel(); testRunCreate(t, open) })
	t.Run("RunCreateFirst", func(t *testing.T) { t.Parallel(); testRunCreateFirst(t, open) })
	t.Run("RunGet", func(t *testing.T) { t.Parallel(); testRunGet(t, open) })
	t.Run("RunList", func(t *testing.T) { t.Parallel(); testRunList(t, open) })
	t.Run("RunListFailing", func(t *testing.T) { t.Parallel(); testRunListFailing(t, open) })
	t.Run("RunClaim", func(t *testing.T) { t.Parallel(); testRunClaim(t, open) })
	t.Run("RunRenew", func(t *testing.T) { t.Parallel(); testRunRenew(t, open) })
	t.Run("RunRelease", func(t *testing.T) { t.Parallel(); testRunRelease(t, open) })
	t.Run("RunAdvance", func(t *testing.T) { t.Parallel(); testRunAdvance(t, open) })
	t.Run("RunAdvanceLease", func(t *testing.T) { t.Parallel(); testRunAdvanceLease(t, open) })
	t.Run("LeasedAsScheduled", func(t *testing.T) { t.Parallel(); testLeasedAsScheduled(t, open) })
	t.Run("RunAdvanceCompleted", func(t *testing.T) { t.Parallel(); testRunAdvanceCompleted(t, open) })
	t.Run("RunAdvanceFeatures", func(t *testing.T) { t.Parallel(); testRunAdvanceFeatures(t, open) })
	t.Run("ChildRuns", func(t *testing.T) { t.Parallel(); testChildren(t, open) })
	t.Run("RunCancel", func(t *testing.T) { t.Parallel(); testRunCancel(t, open) })
	t.Run("RunRedrive", func(t *testing.T) { t.Parallel(); testRedrive(t, open) })
	t.Run("RunErrorOfAStep", func(t *testing.T) { t.Parallel(); testRunErrorOfAStep(t, open) })
	t.Run("SignalSend", func(t *testing.T) { t.Parallel(); testSignals(t, open) })
	t.Run("HistoryList", func(t *testing.T) { t.Parallel(); testHistoryList(t, open) })
	t.Run("TaskClaim", func(t *testing.T) { t.Parallel(); testTaskClaim(t, open) })
	t.Run("TaskGet", func(t *testing.T) { t.Parallel(); testTaskGet(t, open) })
	t.Run("TaskAttemptList", func(t *testing.T) { t.Parallel(); testTaskAttemptList(t, open) })
	t.Run("TaskHeartbeat", func(t *testing.T) { t.Parallel(); testTaskHeartbeat(t, open) })
	t.Run("TaskComplete", func(t *testing.T) { t.Parallel(); testTaskComplete(t, open) })
	t.Run("TaskFail", func(t *testing.T) { t.Parallel(); testTaskFail(t, open) })
	t.Run("TaskFailLeaseNext", func(t *testing.T) { t.Parallel(); testTaskFailLeaseNext(t, open) })
	t.Run("TaskListExpired", func(t *testing.T) { t.Parallel(); testTaskListExpired(t, open) })
	t.Run("TaskListWaiting", func(t *testing.T) { t.Parallel(); testTaskListWaiting(t, open) })
	t.Run("TaskRelease", func(t *testing.T) { t.Parallel(); testTaskRelease(t, open) })
	t.Run("TimerFire", func(t *testing.T) { t.Parallel(); testTimerFire(t, open) })
	t.Run("NextWake", func(t *testing.T) { t.Parallel(); testNextWake(t, open) })
	t.Run("StepDefinitions", func(t *testing.T) { t.Parallel(); testStepDefinitions(t, open) })
	t.Run("Flows", func(t *testing.T) { t.Parallel(); testFlows(t, open) })
}

// start is the fake clock's first reading. It has microseconds, so a store
// that keeps less precision fails; no test relies on more.
var start = time.Date(2025, 6, 1, 12, 0, 0, 123456000, time.UTC)

// Names used throughout the suite.
const (
	engine  = "engine-1"
	engine2 = "engine-2"
	worker  = "worker-1"
	worker2 = "worker-2"
	minute  = time.Minute
)

// A clock is a fake time source that moves only when told.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// A fixture is one test's store and clock, with helpers that fail the test
// on unexpected errors.
type fixture struct {
	t     *testing.T
	store store.Store
	clock *clock
}

func setup(t *testing.T, open Open) *fixture {
	t.Helper()
	c := &clock{now: start}
	return &fixture{t: t, store: open(t, c.Now), clock: c}
}

func (f *fixture) now() time.Time { return f.clock.Now() }

// create creates a run leased to engine for a minute.
func (f *fixture) create(id string) store.RunLease {
	f.t.Helper()
	lease, created, err := f.store.RunCreate(f.t.Context(), &store.RunCreateParams{
		ID:       id,
		Workflow: "order",
		Input:    json.RawMessage(`{"run":"` + id + `"}`),
		Owner:    engine,
		LeaseTTL: minute,
	})
	if err != nil {
		f.t.Fatalf("RunCreate(%s): %v", id, err)
	}
	if !created {
		f.t.Fatalf("RunCreate(%s): created = false", id)
	}
	return lease
}

// advance calls RunAdvance with the lease's token and returns the events.
func (f *fixture) advance(lease store.RunLease, p store.RunAdvanceParams) []store.Event {
	f.t.Helper()
	return f.advanced(lease, p).Events
}

// advanced calls RunAdvance with the lease's token.
func (f *fixture) advanced(lease store.RunLease, p store.RunAdvanceParams) *store.Advanced {
	f.t.Helper()
	p.RunID = lease.Run.ID
	p.Token = lease.Token
	adv, err := f.store.RunAdvance(f.t.Context(), &p)
	if err != nil {
		f.t.Fatalf("RunAdvance(%s): %v", lease.Run.ID, err)
	}
	return adv
}

// schedule creates a run with the given steps scheduled and returns its
// lease.
func (f *fixture) schedule(id string, steps ...store.StepSpec) store.RunLease {
	f.t.Helper()
	lease := f.create(id)
	f.advance(lease, store.RunAdvanceParams{Steps: steps})
	return lease
}

// newStep returns a step with every field set.
func newStep(position int, name string) store.StepSpec {
	return store.StepSpec{
		Position:       position,
		Name:           name,
		Input:          json.RawMessage(fmt.Sprintf(`{"position":%d}`, position)),
		IdempotencyKey: fmt.Sprintf("key-%s-%d", name, position),
		PolicyText:     "[retry: 3, backoff: 1s]",
		Policy:         json.RawMessage(`{"rules":[{"max_attempts":4}]}`),
	}
}

// withTimeout returns s with an attempt timeout.
func withTimeout(s store.StepSpec, d time.Duration) store.StepSpec {
	s.Timeout = d
	return s
}

// claim claims tasks of one step name for owner with the given lease.
func (f *fixture) claim(owner, step string, limit int, ttl time.Duration) []*store.Task {
	f.t.Helper()
	tasks, err := f.store.TaskClaim(f.t.Context(), &store.TaskClaimParams{
		Owner:    owner,
		Steps:    []store.StepQuota{{Name: step, Limit: limit}},
		LeaseTTL: ttl,
	})
	if err != nil {
		f.t.Fatalf("TaskClaim(%s): %v", step, err)
	}
	return tasks
}

// claimOne claims exactly one task of the step name, for worker with a
// minute's lease.
func (f *fixture) claimOne(step string) *store.Task {
	f.t.Helper()
	tasks := f.claim(worker, step, 1, minute)
	if len(tasks) != 1 {
		f.t.Fatalf("TaskClaim(%s): got %d tasks, want 1", step, len(tasks))
	}
	return tasks[0]
}

// claimNone requires that nothing of the step name can be claimed.
func (f *fixture) claimNone(step string) {
	f.t.Helper()
	if tasks := f.claim(worker2, step, 10, minute); len(tasks) != 0 {
		f.t.Fatalf("TaskClaim(%s): got %d tasks, want none", step, len(tasks))
	}
}

func (f *fixture) get(id string) *store.Run {
	f.t.Helper()
	run, err := f.store.RunGet(f.t.Context(), id)
	if err != nil {
		f.t.Fatalf("RunGet(%s): %v", id, err)
	}
	return run
}

func (f *fixture) history(runID string) []store.Event {
	f.t.Helper()
	events, err := f.store.HistoryList(f.t.Context(), &store.HistoryListParams{RunID: runID})
	if err != nil {
		f.t.Fatalf("HistoryList(%s): %v", runID, err)
	}
	return events
}

// last returns the run's last n events.
func (f *fixture) last(runID string, n int) []store.Event {
	f.t.Helper()
	events := f.history(runID)
	if len(events) < n {
		f.t.Fatalf("history of %s has %d events, want at least %d", runID, len(events), n)
	}
	return events[len(events)-n:]
}

func (f *fixture) complete(task *store.Task) *store.Outcome {
	f.t.Helper()
	out, err := f.store.TaskComplete(f.t.Context(), &store.TaskCompleteParams{
		TaskID: task.ID, Token: task.Token, Attempt: task.Attempt, Output: json.RawMessage(`"done"`),
	})
	if err != nil {
		f.t.Fatalf("TaskComplete(%d): %v", task.ID, err)
	}
	return out
}

// retry fails the task's attempt with a retry after delay.
func (f *fixture) retry(task *store.Task, delay time.Duration) *store.Outcome {
	f.t.Helper()
	out, err := f.store.TaskFail(f.t.Context(), retryParams(task, delay))
	if err != nil {
		f.t.Fatalf("TaskFail(%d): %v", task.ID, err)
	}
	return out
}

func retryParams(task *store.Task, delay time.Duration) *store.TaskFailParams {
	return &store.TaskFailParams{
		TaskID:  task.ID,
		Token:   task.Token,
		Attempt: task.Attempt,
		Error:   store.ErrorInfo{Type: "NetworkError", Message: "connection reset"},
		Retry:   true,
		Delay:   delay,
		Rule:    "[retry: 3, backoff: 1s]",
	}
}

// requireChangedNothing runs write, which must fail with want, and requires
// that the run's history and record stayed as they were.
func (f *fixture) requireChangedNothing(runID string, want error, write func() error) {
	f.t.Helper()
	before := f.history(runID)
	runBefore := f.get(runID)
	err := write()
	if !errors.Is(err, want) {
		f.t.Fatalf("got error %v, want %v", err, want)
	}
	requireEvents(f.t, f.history(runID), before)
	if runAfter := f.get(runID); !reflect.DeepEqual(normRun(runAfter), normRun(runBefore)) {
		f.t.Fatalf("run changed by a failed write:\n got %+v\nwant %+v", runAfter, runBefore)
	}
}

func requireErr(t *testing.T, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("got error %v, want %v", err, want)
	}
}

func requireTime(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if !got.Equal(want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

func requireJSON(t *testing.T, what string, got, want json.RawMessage) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s = %s, want %s", what, got, want)
	}
}

// requireEvents compares events field by field; times are compared as
// instants.
func requireEvents(t *testing.T, got, want []store.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d:\n got %s\nwant %s", len(got), len(want), dump(got), dump(want))
	}
	for i := range got {
		g, w := normEvent(got[i]), normEvent(want[i])
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("event %d:\n got %s\nwant %s", i, dump([]store.Event{g}), dump([]store.Event{w}))
		}
	}
}

func dump(events []store.Event) string {
	b, _ := json.Marshal(events)
	return string(b)
}

// normEvent makes equal events deeply equal: times in UTC without
// monotonic readings, empty JSON as nil.
func normEvent(e store.Event) store.Event {
	e.At = normTime(e.At)
	e.LeaseUntil = normTime(e.LeaseUntil)
	e.RetryAt = normTime(e.RetryAt)
	e.FireAt = normTime(e.FireAt)
	e.Input = normJSON(e.Input)
	e.Output = normJSON(e.Output)
	return e
}

func normRun(r *store.Run) store.Run {
	n := *r
	n.CreatedAt = normTime(n.CreatedAt)
	n.UpdatedAt = normTime(n.UpdatedAt)
	n.Input = normJSON(n.Input)
	n.Output = normJSON(n.Output)
	return n
}

func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Round(0)
}

func normJSON(m json.RawMessage) json.RawMessage {
	if len(m) == 0 {
		return nil
	}
	return m
}
