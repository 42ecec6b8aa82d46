package postgres_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"reprise/postgres"
	"reprise/store"
)

// TestMigrateFromVersion1 opens a store on a database that version 1 of
// the schema holds data in: the migration keeps the runs and tasks, and
// gives them the new columns' defaults.
func TestMigrateFromVersion1(t *testing.T) {
	t.Parallel()
	dsn, schema := testSchema(t)
	init, err := os.ReadFile("migrations/0001_init.sql")
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, dsn)
	ctx := t.Context()
	for _, sql := range []string{
		"SET search_path TO " + schema,
		string(init),
		`CREATE TABLE reprise_migration (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
		`INSERT INTO reprise_migration (version, name) VALUES (1, '0001_init.sql')`,
		`INSERT INTO reprise_run (id, workflow, status, last_seq, created_at, updated_at) VALUES ('old', 'wf', 'running', 1, now(), now())`,
		`INSERT INTO reprise_event (run_id, seq, type, execution, at, data) VALUES ('old', 1, 'RunStarted', 1, now(), '{"seq":1,"type":"RunStarted"}')`,
		`INSERT INTO reprise_task (run_id, execution, position, step, idempotency_key, ready_at, created_at, attempt)
			VALUES ('old', 1, 1, 'a', 'k', now(), now(), 2)`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	s := openOn(t, dsn, &postgres.Options{Schema: schema})
	run := must[*store.Run](t)(s.RunGet(ctx, "old"))
	if run.Status != store.RunRunning || run.ParentID != "" {
		t.Errorf("run after migrating = %+v", run)
	}
	// An event of the old layout, whose JSON holds its seq, reads as it was.
	events := must[[]store.Event](t)(s.HistoryList(ctx, &store.HistoryListParams{RunID: "old"}))
	if len(events) != 1 || events[0].Seq != 1 || events[0].Type != store.EventRunStarted || events[0].Execution != 1 {
		t.Errorf("history after migrating = %+v", events)
	}
	tasks := must[[]*store.Task](t)(s.TaskClaim(ctx, &store.TaskClaimParams{
		Owner: "w", Steps: []store.StepQuota{{Name: "a", Limit: 1}}, LeaseTTL: time.Minute,
	}))
	if len(tasks) != 1 || tasks[0].Attempt != 3 || tasks[0].Base != 0 || tasks[0].Lapses != 0 {
		t.Fatalf("claim after migrating = %+v", tasks)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM reprise_migration").Scan(&n); err != nil || n != postgres.SchemaVersion() {
		t.Errorf("migrations recorded: %d, %v; want %d", n, err, postgres.SchemaVersion())
	}
}

// TestAdvanceThatEnds checks what an advance that ends its execution does
// with what it starts: steps and timers are only recorded, and children
// are created already cancelled, since a child never outlives its parent.
// A cancel of a step scheduled in the same advance drops it.
func TestAdvanceThatEnds(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s := openStore(t, clock.Now)
	ctx := t.Context()
	step := func(pos int, name string) store.StepSpec {
		return store.StepSpec{Position: pos, Name: name, IdempotencyKey: fmt.Sprint("k", pos)}
	}

	lease := must[store.RunLease](t)(func() (store.RunLease, error) {
		l, _, err := s.RunCreate(ctx, &store.RunCreateParams{ID: "p", Workflow: "wf", Owner: "e", LeaseTTL: time.Minute})
		return l, err
	}())
	adv := must[*store.Advanced](t)(s.RunAdvance(ctx, &store.RunAdvanceParams{
		RunID: "p", Token: lease.Token, LeaseOwner: "e", LeaseTTL: time.Minute,
		Steps:   []store.StepSpec{step(1, "a"), func() store.StepSpec { st := step(2, "b"); st.Lease = true; return st }()},
		Cancels: []int{1, 2, 9},
	}))
	if got := types(adv.Events); got != "StepScheduled StepScheduled AttemptStarted StepCancelRequested StepCancelRequested" {
		t.Errorf("scheduled and cancelled at once: %s", got)
	}
	if len(adv.Tasks) != 0 {
		t.Errorf("leased a cancelled step: %+v", adv.Tasks)
	}
	if tasks := must[[]*store.Task](t)(s.TaskClaim(ctx, &store.TaskClaimParams{
		Owner: "w", Steps: []store.StepQuota{{Name: "a", Limit: 9}, {Name: "b", Limit: 9}}, LeaseTTL: time.Minute,
	})); len(tasks) != 0 {
		t.Errorf("claimed a cancelled step: %+v", tasks)
	}

	adv = must[*store.Advanced](t)(s.RunAdvance(ctx, &store.RunAdvanceParams{
		RunID: "p", Token: lease.Token,
		Steps:    []store.StepSpec{step(3, "a")},
		Timers:   []store.TimerSpec{{Position: 4, Delay: time.Second}},
		Children: []store.ChildSpec{{Position: 5, ID: "c", Workflow: "child"}},
		Finish:   &store.RunFinish{Status: store.RunCompleted},
	}))
	if got := types(adv.Events); got != "StepScheduled TimerScheduled ChildStarted RunCompleted" {
		t.Errorf("finishing advance: %s", got)
	}
	child := must[*store.Run](t)(s.RunGet(ctx, "c"))
	if child.Status != store.RunCancelled || child.ParentID != "p" {
		t.Errorf("child started as its parent finished = %+v", child)
	}
	if got := types(must[[]store.Event](t)(s.HistoryList(ctx, &store.HistoryListParams{RunID: "c"}))); got != "RunStarted RunCancelled" {
		t.Errorf("history of the child = %s", got)
	}
	wake := must[store.Wake](t)(s.NextWake(ctx, &store.NextWakeParams{}))
	if !wake.Task.IsZero() || !wake.Timer.IsZero() {
		t.Errorf("wake after the run finished = %+v", wake)
	}
}

// TestNoticesOfFeatures checks the notices of the grown Store: a child
// run is ready to claim, its end is an outcome for its parent's owner, a
// signal is an outcome, and a redriven run is ready to claim. An outcome
// says the seq of the last event it appended (Notice.Seq).
func TestNoticesOfFeatures(t *testing.T) {
	t.Parallel()
	dsn, schema := testSchema(t)
	s := openOn(t, dsn, &postgres.Options{Schema: schema})
	ctx := t.Context()
	notices := listen(t, s)
	awaitResync(t, notices)
	expect := func(what string, want postgres.Notice) {
		t.Helper()
		n := next(t, notices)
		n.At = time.Time{}
		if n != want {
			t.Errorf("after %s: %+v, want %+v", what, n, want)
		}
	}

	parent, _, err := s.RunCreate(ctx, &store.RunCreateParams{ID: "p", Workflow: "wf", Owner: "e1", LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	must[*store.Advanced](t)(s.RunAdvance(ctx, &store.RunAdvanceParams{RunID: "p", Token: parent.Token,
		Children: []store.ChildSpec{{Position: 1, ID: "c", Workflow: "child"}}}))
	expect("starting a child", postgres.Notice{Kind: postgres.NoticeRunReady, RunID: "c", Workflow: "child"})

	child := must[[]store.RunLease](t)(s.RunClaim(ctx, &store.RunClaimParams{Owner: "e2", Limit: 1, LeaseTTL: time.Minute}))
	if len(child) != 1 || child[0].Run.ID != "c" || child[0].Run.ParentID != "p" {
		t.Fatalf("claimed %+v", child)
	}
	adv := must[*store.Advanced](t)(s.RunAdvance(ctx, &store.RunAdvanceParams{RunID: "c", Token: child[0].Token,
		Finish: &store.RunFinish{Status: store.RunCompleted, Output: json.RawMessage(`"done"`)}}))
	if adv.Parent == nil || adv.Parent.RunID != "p" || adv.Parent.Owner != "e1" || types(adv.Parent.Events) != "ChildCompleted" {
		t.Fatalf("parent outcome = %+v", adv.Parent)
	}
	// The child's owner ended it and hears nothing of it; its parent's
	// owner hears of ChildCompleted.
	expect("the child's end", postgres.Notice{Kind: postgres.NoticeOutcome, RunID: "p", Owner: "e1", Seq: 3})

	must[*store.Outcome](t)(s.SignalSend(ctx, &store.SignalSendParams{RunID: "p", Name: "go"}))
	expect("a signal", postgres.Notice{Kind: postgres.NoticeOutcome, RunID: "p", Owner: "e1", Seq: 4})
}

// TestParentAndChildEndTogether ends parents and their children at once,
// from several goroutines, while their owner renews its leases: the end of
// a child writes to its parent and the end of a parent cancels its child,
// so they lock both runs, and no transition may fail on a deadlock. Either
// the child's end reaches its active parent, or the parent's end cancels
// the child first.
func TestParentAndChildEndTogether(t *testing.T) {
	t.Parallel()
	s := openStore(t, nil)
	ctx := t.Context()
	const pairs = 20
	type pair struct{ parent, child store.RunLease }
	ps := make([]pair, pairs)
	for i := range ps {
		// Ids in both orders, so that RunRenew's id order crosses the
		// parent-first order of the ends.
		pid, cid := fmt.Sprintf("p%02d", i), fmt.Sprintf("c%02d", i)
		if i%2 == 1 {
			pid, cid = cid, pid
		}
		parent, _, err := s.RunCreate(ctx, &store.RunCreateParams{ID: pid, Workflow: "wf", Owner: "e", LeaseTTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		must[*store.Advanced](t)(s.RunAdvance(ctx, &store.RunAdvanceParams{RunID: pid, Token: parent.Token,
			Children: []store.ChildSpec{{Position: 1, ID: cid, Workflow: "child"}}}))
		ps[i].parent = parent
	}
	for claimed := 0; claimed < pairs; {
		leases := must[[]store.RunLease](t)(s.RunClaim(ctx, &store.RunClaimParams{Owner: "e", Workflows: []string{"child"}, Limit: pairs, LeaseTTL: time.Minute}))
		for _, l := range leases {
			for i := range ps {
				if l.Run.ParentID == ps[i].parent.Run.ID {
					ps[i].child = l
					claimed++
				}
			}
		}
	}

	var wg sync.WaitGroup
	errs := make(chan error, 4*pairs)
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := s.RunRenew(ctx, &store.RunRenewParams{Owner: "e", LeaseTTL: time.Minute}); err != nil {
				errs <- err
			}
		}
	})
	var ends sync.WaitGroup
	for i, p := range ps {
		ends.Go(func() {
			_, err := s.RunAdvance(ctx, &store.RunAdvanceParams{RunID: p.child.Run.ID, Token: p.child.Token,
				Finish: &store.RunFinish{Status: store.RunCompleted}})
			if err != nil && !errors.Is(err, store.ErrRunFinished) {
				errs <- err
			}
		})
		ends.Go(func() {
			var err error
			if i%3 == 0 {
				_, err = s.RunCancel(ctx, &store.RunCancelParams{ID: p.parent.Run.ID})
			} else {
				_, err = s.RunAdvance(ctx, &store.RunAdvanceParams{RunID: p.parent.Run.ID, Token: p.parent.Token,
					Finish: &store.RunFinish{Status: store.RunCompleted}})
			}
			if err != nil {
				errs <- err
			}
		})
	}
	ends.Wait()
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	for _, p := range ps {
		child := must[*store.Run](t)(s.RunGet(ctx, p.child.Run.ID))
		history := types(must[[]store.Event](t)(s.HistoryList(ctx, &store.HistoryListParams{RunID: p.parent.Run.ID})))
		switch child.Status {
		case store.RunCompleted:
			if history != "RunStarted ChildStarted ChildCompleted RunCompleted" && history != "RunStarted ChildStarted ChildCompleted RunCancelled" {
				t.Errorf("child %s completed; parent's history: %s", child.ID, history)
			}
		case store.RunCancelled:
			if history != "RunStarted ChildStarted RunCompleted" && history != "RunStarted ChildStarted RunCancelled" {
				t.Errorf("child %s cancelled; parent's history: %s", child.ID, history)
			}
		default:
			t.Errorf("child %s outlived its parent: %s", child.ID, child.Status)
		}
	}
}

// TestRunCreateChildIsCancelledWithItsParent creates a child through
// RunCreate rather than RunAdvance: its parent still knows to look for it.
func TestRunCreateChildIsCancelledWithItsParent(t *testing.T) {
	t.Parallel()
	s := openStore(t, newFakeClock().Now)
	ctx := t.Context()
	for _, p := range []*store.RunCreateParams{
		{ID: "p", Workflow: "wf"},
		{ID: "c", Workflow: "child", ParentID: "p", ParentPosition: 3, ParentExecution: 1},
		{ID: "g", Workflow: "child", ParentID: "c", ParentPosition: 1, ParentExecution: 1},
	} {
		if _, _, err := s.RunCreate(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	must[*store.Cancelled](t)(s.RunCancel(ctx, &store.RunCancelParams{ID: "p", Reason: "test"}))
	for _, id := range []string{"c", "g"} {
		run := must[*store.Run](t)(s.RunGet(ctx, id))
		history := must[[]store.Event](t)(s.HistoryList(ctx, &store.HistoryListParams{RunID: id}))
		if run.Status != store.RunCancelled || types(history) != "RunStarted RunCancelled" || history[1].Reason != "parent cancelled" {
			t.Errorf("%s after its parent's cancel: %+v, history %s", id, run, types(history))
		}
	}
}
