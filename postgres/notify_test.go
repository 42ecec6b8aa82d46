package postgres_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"reprise/postgres"
	"reprise/store"
)

// listen runs s.Listen until the test ends and returns its notices.
func listen(t *testing.T, s *postgres.Store) <-chan postgres.Notice {
	t.Helper()
	notices := make(chan postgres.Notice, 100)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- s.Listen(ctx, func(n postgres.Notice) { notices <- n }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Listen: %v", err)
		}
	})
	return notices
}

// next returns the next notice that is not a NoticeResync.
func next(t *testing.T, notices <-chan postgres.Notice) postgres.Notice {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case n := <-notices:
			if n.Kind != postgres.NoticeResync {
				return n
			}
		case <-timeout:
			t.Fatal("no notice within 10s")
		}
	}
}

// awaitResync waits for the listener to be listening.
func awaitResync(t *testing.T, notices <-chan postgres.Notice) {
	t.Helper()
	select {
	case n := <-notices:
		if n.Kind != postgres.NoticeResync {
			t.Fatalf("first notice %+v, want resync", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not listening within 10s")
	}
}

// TestListen checks that one store hears what another, with a pool of its
// own, does on the same schema, and that the listener comes back after its
// connection is killed.
func TestListen(t *testing.T) {
	t.Parallel()
	dsn, schema := testSchema(t)
	listener := openOn(t, dsn, &postgres.Options{Schema: schema})
	s := openOn(t, dsn, &postgres.Options{Schema: schema})
	ctx := t.Context()
	notices := listen(t, listener)
	awaitResync(t, notices)

	// A run nobody owns waits for a claim.
	if _, _, err := s.RunCreate(ctx, &store.RunCreateParams{ID: "free", Workflow: "wf"}); err != nil {
		t.Fatal(err)
	}
	if n := next(t, notices); n.Kind != postgres.NoticeRunReady || n.RunID != "free" || n.Workflow != "wf" {
		t.Errorf("after an unowned create: %+v", n)
	}

	// Scheduling steps makes tasks ready: one notice per step name.
	lease, _, err := s.RunCreate(ctx, &store.RunCreateParams{ID: "r", Workflow: "wf", Owner: "e1", LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(-time.Minute)
	if _, err := s.RunAdvance(ctx, &store.RunAdvanceParams{RunID: "r", Token: lease.Token, Steps: []store.StepSpec{
		{Position: 1, Name: "a", IdempotencyKey: "k1"},
		{Position: 2, Name: "a", IdempotencyKey: "k2"},
	}}); err != nil {
		t.Fatal(err)
	}
	if n := next(t, notices); n.Kind != postgres.NoticeTaskReady || n.Step != "a" || n.At.Before(before) {
		t.Errorf("after scheduling: %+v", n)
	}

	claim := func() []*store.Task {
		tasks, err := s.TaskClaim(ctx, &store.TaskClaimParams{Owner: "w", Steps: []store.StepQuota{{Name: "a", Limit: 2}}, LeaseTTL: time.Minute})
		if err != nil || len(tasks) != 2 {
			t.Fatalf("claim: %v, %d tasks", err, len(tasks))
		}
		return tasks
	}
	tasks := claim()

	// A retry makes the task ready at its retry time.
	if _, err := s.TaskFail(ctx, &store.TaskFailParams{TaskID: tasks[0].ID, Token: tasks[0].Token,
		Error: store.ErrorInfo{Type: "E"}, Retry: true, Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if n := next(t, notices); n.Kind != postgres.NoticeTaskReady || n.Step != "a" || n.At.Before(time.Now().Add(50*time.Minute)) {
		t.Errorf("after a retry: %+v", n)
	}

	// A result is an outcome for the run's owner.
	// It says the seq of the event it appended.
	o, err := s.TaskComplete(ctx, &store.TaskCompleteParams{TaskID: tasks[1].ID, Token: tasks[1].Token, Output: json.RawMessage(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	if n := next(t, notices); n.Kind != postgres.NoticeOutcome || n.RunID != "r" || n.Owner != "e1" || n.Seq != o.Events[len(o.Events)-1].Seq {
		t.Errorf("after a result: %+v, outcome %+v", n, o.Events)
	}

	// Kill the listener's connection: it reconnects, says so, and hears
	// what comes next.
	var killed int
	if err := connect(t, dsn).QueryRow(ctx, `
		SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE query = 'LISTEN "reprise_`+schema+`"'`).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminate the listener: %v, %d killed", err, killed)
	}
	awaitResync(t, notices)
	if _, err := s.RunCancel(ctx, &store.RunCancelParams{ID: "r", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	if n := next(t, notices); n.Kind != postgres.NoticeOutcome || n.RunID != "r" || n.Owner != "e1" {
		t.Errorf("after a cancel: %+v", n)
	}
}

// TestListenSchemas checks that stores on different schemas do not hear
// each other.
func TestListenSchemas(t *testing.T) {
	t.Parallel()
	listener := openStore(t, nil)
	other := openStore(t, nil)
	notices := listen(t, listener)
	awaitResync(t, notices)
	if _, _, err := other.RunCreate(t.Context(), &store.RunCreateParams{ID: "other", Workflow: "wf"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := listener.RunCreate(t.Context(), &store.RunCreateParams{ID: "mine", Workflow: "wf"}); err != nil {
		t.Fatal(err)
	}
	if n := next(t, notices); n.RunID != "mine" {
		t.Errorf("heard %+v from another schema", n)
	}
}

// TestConnectionLoss kills every connection of a store, its listener's
// included, as a server restart does: calls fail for a moment and then work
// again on new connections, and the listener comes back.
func TestConnectionLoss(t *testing.T) {
	t.Parallel()
	dsn, schema := testSchema(t)
	app := "reprise_" + schema
	s := openOn(t, dsn+"&application_name="+app, &postgres.Options{Schema: schema})
	ctx := t.Context()
	notices := listen(t, s)
	awaitResync(t, notices)
	lease, _, err := s.RunCreate(ctx, &store.RunCreateParams{ID: "r", Workflow: "wf", Owner: "e", LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	var killed int
	if err := connect(t, dsn).QueryRow(ctx, `
		SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&killed); err != nil || killed < 2 {
		t.Fatalf("terminate the store's connections: %v, %d killed", err, killed)
	}
	awaitResync(t, notices)

	advance := func() error {
		_, err := s.RunAdvance(ctx, &store.RunAdvanceParams{RunID: "r", Token: lease.Token,
			Steps: []store.StepSpec{{Position: 1, Name: "a", IdempotencyKey: "k"}}})
		return err
	}
	failures := 0
	for err := advance(); err != nil; err = advance() {
		// A call on a connection that died fails once; each retry takes
		// another pooled connection, or a new one.
		if failures++; failures > 10 {
			t.Fatalf("still failing after %d tries: %v", failures, err)
		}
	}
	if n := next(t, notices); n.Kind != postgres.NoticeTaskReady || n.Step != "a" {
		t.Errorf("after reconnecting: %+v", n)
	}
	history, err := s.HistoryList(ctx, &store.HistoryListParams{RunID: "r"})
	if err != nil || types(history) != "RunStarted StepScheduled" {
		t.Fatalf("history after reconnecting: %v %s", err, types(history))
	}
	t.Logf("%d calls failed before one worked", failures)
}

// TestListenRelease checks that an engine releasing its runs tells the
// others to claim them.
func TestListenRelease(t *testing.T) {
	t.Parallel()
	dsn, schema := testSchema(t)
	listener := openOn(t, dsn, &postgres.Options{Schema: schema})
	s := openOn(t, dsn, &postgres.Options{Schema: schema})
	notices := listen(t, listener)
	awaitResync(t, notices)
	if _, _, err := s.RunCreate(t.Context(), &store.RunCreateParams{ID: "r", Workflow: "wf", Owner: "e1", LeaseTTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := s.RunRelease(t.Context(), &store.RunReleaseParams{Owner: "e1"}); err != nil {
		t.Fatal(err)
	}
	if n := next(t, notices); n.Kind != postgres.NoticeRunReady || n.RunID != "" {
		t.Errorf("after a release: %+v", n)
	}
	leases, err := listener.RunClaim(t.Context(), &store.RunClaimParams{Owner: "e2", Limit: 10, LeaseTTL: time.Minute})
	if err != nil || len(leases) != 1 {
		t.Fatalf("claim the released run: %v, %d leases", err, len(leases))
	}
}
