package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"reprise/postgres"
	"reprise/store"
	"reprise/storetest"
)

// testDSN returns the test server's address, or skips the test.
func testDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("REPRISE_TEST_POSTGRES")
	if dsn == "" {
		t.Skip("REPRISE_TEST_POSTGRES is not set; set it to a PostgreSQL URL " +
			"(e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable) to run the postgres tests")
	}
	return dsn
}

var schemaSeq atomic.Int64

// testSchema creates an empty schema of its own for the test and drops it
// when the test ends.
func testSchema(t testing.TB) (dsn, schema string) {
	t.Helper()
	dsn, schema = newSchema(t)
	if _, err := connect(t, dsn).Exec(t.Context(), "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	return dsn, schema
}

// newSchema names a schema for the test, which does not exist yet, and
// drops it, if it does, when the test ends.
func newSchema(t testing.TB) (dsn, schema string) {
	t.Helper()
	dsn = testDSN(t)
	schema = fmt.Sprintf("reprise_test_%d_%d", time.Now().UnixNano()%1e9, schemaSeq.Add(1))
	t.Cleanup(func() {
		ctx := context.WithoutCancel(t.Context())
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			t.Error(err)
		}
	})
	return dsn, schema
}

// connect opens a plain connection for the test's own statements.
func connect(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.WithoutCancel(t.Context())) })
	return conn
}

// openStore opens a store on a schema of the test's own; now nil uses the
// database clock.
func openStore(t testing.TB, now func() time.Time) *postgres.Store {
	t.Helper()
	dsn, schema := testSchema(t)
	return openOn(t, dsn, &postgres.Options{Schema: schema, Now: now})
}

func openOn(t testing.TB, dsn string, opts *postgres.Options) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(t.Context(), dsn, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// A fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// types returns the types of events, for comparing histories.
func types(events []store.Event) string {
	var b strings.Builder
	for i, e := range events {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(string(e.Type))
	}
	return b.String()
}

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// TestLifecycle walks a run through every kind of transition on a fake
// clock.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s := openStore(t, clock.Now)
	ctx := t.Context()

	lease, created, err := s.RunCreate(ctx, &store.RunCreateParams{
		ID: "r1", Workflow: "wf", Input: json.RawMessage(`{"n": 1}`), Owner: "e1", LeaseTTL: time.Minute,
	})
	if err != nil || !created || lease.Token == 0 {
		t.Fatalf("create: %v %v %+v", err, created, lease)
	}
	if got := string(lease.Run.Input); got != `{"n": 1}` {
		t.Errorf("input = %s", got)
	}
	again, created, err := s.RunCreate(ctx, &store.RunCreateParams{ID: "r1", Workflow: "wf", Owner: "e2"})
	if err != nil || created || again.Token != 0 || again.Run.ID != "r1" {
		t.Fatalf("create again: %v %v %+v", err, created, again)
	}

	clock.Add(time.Second)
	adv, err := s.RunAdvance(ctx, &store.RunAdvanceParams{
		RunID: "r1", Token: lease.Token,
		Steps: []store.StepSpec{{
			Position: 1, Name: "charge", Input: json.RawMessage(`"x"`), IdempotencyKey: "k1",
			PolicyText: "[retry: 3]", Policy: json.RawMessage(`{}`), Timeout: 10 * time.Second,
		}},
		Timers: []store.TimerSpec{{Position: 2, Delay: time.Hour}},
	})
	if err != nil {
		t.Fatal(err)
	}
	events := adv.Events
	if got := types(events); got != "StepScheduled TimerScheduled" {
		t.Fatalf("advance events = %s", got)
	}
	if !events[1].FireAt.Equal(clock.Now().Add(time.Hour)) {
		t.Errorf("fire at = %v", events[1].FireAt)
	}
	if _, err := s.RunAdvance(ctx, &store.RunAdvanceParams{RunID: "r1", Token: lease.Token + 1}); !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("advance with a stale token: %v", err)
	}

	tasks := must[[]*store.Task](t)(s.TaskClaim(ctx, &store.TaskClaimParams{
		Owner: "w1", Steps: []store.StepQuota{{Name: "charge", Limit: 5}}, LeaseTTL: time.Minute,
	}))
	if len(tasks) != 1 || tasks[0].Attempt != 1 || !tasks[0].LeaseUntil.Equal(clock.Now().Add(10*time.Second)) {
		t.Fatalf("claim = %+v", tasks)
	}
	task := tasks[0]
	if string(task.Input) != `"x"` || task.IdempotencyKey != "k1" || task.Timeout != 10*time.Second {
		t.Errorf("task = %+v", task)
	}
	clock.Add(time.Second)
	until := must[time.Time](t)(s.TaskHeartbeat(ctx, &store.TaskHeartbeatParams{TaskID: task.ID, Token: task.Token, LeaseTTL: time.Minute}))
	if !until.Equal(task.StartedAt.Add(10 * time.Second)) {
		t.Errorf("heartbeat until %v, want the timeout's end", until)
	}
	o := must[*store.Outcome](t)(s.TaskFail(ctx, &store.TaskFailParams{
		TaskID: task.ID, Token: task.Token, Error: store.ErrorInfo{Type: "NetworkError", Message: "down"},
		Retry: true, Delay: 5 * time.Second, Rule: "[retry: 3]",
	}))
	if o.Owner != "e1" || types(o.Events) != "AttemptFailed" || !o.Events[0].RetryAt.Equal(clock.Now().Add(5*time.Second)) {
		t.Fatalf("fail outcome = %+v", o)
	}
	if tasks := must[[]*store.Task](t)(s.TaskClaim(ctx, &store.TaskClaimParams{
		Owner: "w1", Steps: []store.StepQuota{{Name: "charge", Limit: 5}}, LeaseTTL: time.Minute,
	})); len(tasks) != 0 {
		t.Fatalf("claimed a task in its backoff: %+v", tasks)
	}
	wake := must[store.Wake](t)(s.NextWake(ctx, &store.NextWakeParams{Steps: []string{"charge"}}))
	if !wake.Task.Equal(clock.Now().Add(5*time.Second)) || !wake.Timer.Equal(events[1].FireAt) || !wake.Lease.IsZero() {
		t.Errorf("wake = %+v", wake)
	}
	clock.Add(5 * time.Second)
	tasks = must[[]*store.Task](t)(s.TaskClaim(ctx, &store.TaskClaimParams{
		Owner: "w2", Steps: []store.StepQuota{{Name: "charge", Limit: 5}}, LeaseTTL: time.Minute,
	}))
	if len(tasks) != 1 || tasks[0].Attempt != 2 || tasks[0].Token == task.Token || !tasks[0].FirstStartedAt.Equal(task.StartedAt) {
		t.Fatalf("second claim = %+v", tasks)
	}
	if _, err := s.TaskComplete(ctx, &store.TaskCompleteParams{TaskID: task.ID, Token: task.Token}); !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("complete with the first attempt's token: %v", err)
	}
	o = must[*store.Outcome](t)(s.TaskComplete(ctx, &store.TaskCompleteParams{
		TaskID: tasks[0].ID, Token: tasks[0].Token, Output: json.RawMessage(`{"ok":true}`),
	}))
	if types(o.Events) != "StepCompleted" || o.Events[0].Attempt != 2 || string(o.Events[0].Output) != `{"ok":true}` {
		t.Fatalf("complete outcome = %+v", o)
	}

	clock.Add(time.Hour)
	outcomes := must[[]*store.Outcome](t)(s.TimerFire(ctx, &store.TimerFireParams{}))
	if len(outcomes) != 1 || types(outcomes[0].Events) != "TimerFired" || outcomes[0].Events[0].Position != 2 {
		t.Fatalf("timer outcomes = %+v", outcomes)
	}
	if _, err := s.RunAdvance(ctx, &store.RunAdvanceParams{
		RunID: "r1", Token: lease.Token,
		Finish: &store.RunFinish{Status: store.RunCompleted, Output: json.RawMessage(`7`)},
	}); err != nil {
		t.Fatal(err)
	}
	run := must[*store.Run](t)(s.RunGet(ctx, "r1"))
	if run.Status != store.RunCompleted || string(run.Output) != "7" || !run.UpdatedAt.Equal(clock.Now()) {
		t.Errorf("run = %+v", run)
	}
	history := must[[]store.Event](t)(s.HistoryList(ctx, &store.HistoryListParams{RunID: "r1"}))
	want := "RunStarted StepScheduled TimerScheduled AttemptStarted AttemptFailed AttemptStarted StepCompleted TimerFired RunCompleted"
	if got := types(history); got != want {
		t.Errorf("history = %s\nwant      %s", got, want)
	}
	for i, e := range history {
		if e.Seq != int64(i+1) || e.Execution != 1 {
			t.Errorf("event %d: seq %d execution %d", i, e.Seq, e.Execution)
		}
	}
	if _, err := s.RunCancel(ctx, &store.RunCancelParams{ID: "r1"}); !errors.Is(err, store.ErrRunFinished) {
		t.Errorf("cancel a finished run: %v", err)
	}
	if _, err := s.HistoryList(ctx, &store.HistoryListParams{RunID: "nope"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("history of no run: %v", err)
	}
}

// TestStore runs the conformance suite, each test on a schema of its own.
func TestStore(t *testing.T) {
	t.Parallel()
	testDSN(t)
	storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
		return openStore(t, now)
	})
}

// TestStorePlain runs the conformance suite on the plain path
// (Options.Plain), which the grouped one is checked against.
func TestStorePlain(t *testing.T) {
	t.Parallel()
	testDSN(t)
	storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
		dsn, schema := testSchema(t)
		return openOn(t, dsn, &postgres.Options{Schema: schema, Now: now, Plain: true})
	})
}

// TestEngines runs the engine liveness cases on two stores on one schema,
// as two processes would have them, on both paths.
func TestEngines(t *testing.T) {
	t.Parallel()
	testDSN(t)
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("plain=%v", plain), func(t *testing.T) {
			t.Parallel()
			storetest.Engines(t, func(t *testing.T) (store.Store, store.Store) {
				dsn, schema := testSchema(t)
				first, err := postgres.Open(t.Context(), dsn, &postgres.Options{Schema: schema, Plain: plain})
				if err != nil {
					t.Fatal(err)
				}
				return first, openOn(t, dsn, &postgres.Options{Schema: schema, Plain: plain})
			})
		})
	}
}

// TestConnectionsEncodeArraysThemselves checks that every connection of a
// store writes the store's arrays with its own encoder.
func TestConnectionsEncodeArraysThemselves(t *testing.T) {
	t.Parallel()
	dsn, schema := testSchema(t)
	s := openOn(t, dsn, &postgres.Options{Schema: schema})
	ok, err := postgres.EncodesArraysItself(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Error("a pooled connection encodes the store's arrays with pgx's codec")
	}
}
