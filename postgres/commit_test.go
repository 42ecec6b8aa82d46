package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"reprise/postgres"
	"reprise/store"
)

// TestGroupCommit queues transitions behind one that waits for a row lock,
// so that they run as one group: they share one transaction, a sentinel
// error in the group changes nothing and costs the others nothing, and a
// transition that fails after writing makes the group run again alone,
// where only that one fails.
func TestGroupCommit(t *testing.T) {
	t.Parallel()
	dsn, schema := testSchema(t)
	s := openOn(t, dsn, &postgres.Options{Schema: schema, Writers: 1})
	ctx := t.Context()
	tokens := map[string]int64{}
	for i := range 4 {
		id := fmt.Sprint("r", i)
		lease, _, err := s.RunCreate(ctx, &store.RunCreateParams{ID: id, Workflow: "wf", Owner: "e1", LeaseTTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		tokens[id] = lease.Token
	}
	step := func(pos int) []store.StepSpec {
		return []store.StepSpec{{Position: pos, Name: "s", IdempotencyKey: fmt.Sprint("k", pos), PolicyText: "[retry: 0]", Policy: json.RawMessage(`{}`)}}
	}
	must[*store.Advanced](t)(s.RunAdvance(ctx, &store.RunAdvanceParams{RunID: "r3", Token: tokens["r3"], Steps: step(1)}))

	group := func(calls map[string]func() error) map[string]error {
		t.Helper()
		return inGroup(t, s, dsn, schema, calls)
	}
	signal := func(run, name string) func() error {
		return func() error {
			_, err := s.SignalSend(ctx, &store.SignalSendParams{RunID: run, Name: name})
			return err
		}
	}
	// writers counts the transactions that wrote the events where holds
	// for, and xmins those that wrote the signals named name.
	writers := func(where string, args ...any) int {
		var n int
		err := connect(t, dsn).QueryRow(ctx, "SELECT count(DISTINCT xmin::text) FROM "+schema+".reprise_event WHERE "+where, args...).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	xmins := func(name string) int { return writers("data->>'signal' = $1", name) }

	got := group(map[string]func() error{
		"one":   signal("r1", "one"),
		"two":   signal("r2", "two"),
		"three": signal("r1", "three"),
		"lost": func() error {
			_, err := s.RunAdvance(ctx, &store.RunAdvanceParams{RunID: "r2", Token: tokens["r2"] + 1, Steps: step(1)})
			return err
		},
		"missing": signal("nope", "missing"),
	})
	for name, want := range map[string]error{"one": nil, "two": nil, "three": nil, "lost": store.ErrLeaseLost, "missing": store.ErrNotFound} {
		if !errors.Is(got[name], want) || want == nil && got[name] != nil {
			t.Errorf("%s: %v, want %v", name, got[name], want)
		}
	}
	for _, name := range []string{"one", "two", "three"} {
		if n := xmins(name); n != 1 {
			t.Errorf("signal %s written by %d transactions", name, n)
		}
	}
	if shared := writers("data->>'signal' IN ('one', 'two', 'three')"); shared != 1 {
		t.Errorf("the group's signals were written by %d transactions, want 1", shared)
	}
	checkHistory(t, s, "r2", store.EventRunStarted, store.EventSignalReceived)

	// Position 1 of r3 is taken: its insert fails in the group's write
	// pipeline, after the signals before it were sent.
	got = group(map[string]func() error{
		"four": signal("r1", "four"),
		"dup": func() error {
			_, err := s.RunAdvance(ctx, &store.RunAdvanceParams{RunID: "r3", Token: tokens["r3"], Steps: step(1)})
			return err
		},
		"five": signal("r2", "five"),
	})
	if got["four"] != nil || got["five"] != nil {
		t.Errorf("the others of a failed group: %v, %v; want them recorded", got["four"], got["five"])
	}
	if err := got["dup"]; err == nil || errors.Is(err, context.Canceled) {
		t.Errorf("advance onto a taken position: %v, want an error", err)
	}
	checkHistory(t, s, "r3", store.EventRunStarted, store.EventStepScheduled)
	checkHistory(t, s, "r1", store.EventRunStarted, store.EventSignalReceived, store.EventSignalReceived, store.EventSignalReceived)

	// Advances read their runs ahead, all in the group's first round
	// trip; the second advance of r2 read r2 before the first's writes,
	// and must read it again after them, in the same transaction.
	advance := func(run string, pos int) func() error {
		return func() error {
			_, err := s.RunAdvance(ctx, &store.RunAdvanceParams{RunID: run, Token: tokens[run], Steps: step(pos)})
			return err
		}
	}
	got = group(map[string]func() error{"six": advance("r2", 6), "seven": advance("r2", 7), "eight": advance("r1", 8)})
	for name, err := range got {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if n := writers("data->>'type' = 'StepScheduled' AND run_id IN ('r1', 'r2')"); n != 1 {
		t.Errorf("the group's advances were written by %d transactions, want 1", n)
	}
	checkHistory(t, s, "r2", store.EventRunStarted, store.EventSignalReceived, store.EventSignalReceived,
		store.EventStepScheduled, store.EventStepScheduled)
}

// inGroup runs the calls' transitions as one group on s, which has one
// writer: the writer is busy with a signal to run r0 (which must exist)
// until the test's own transaction, which holds r0's row, ends.
func inGroup(t *testing.T, s *postgres.Store, dsn, schema string, calls map[string]func() error) map[string]error {
	t.Helper()
	ctx := t.Context()
	type result struct {
		name string
		err  error
	}
	conn := connect(t, dsn)
	if _, err := conn.Exec(ctx, "BEGIN; SELECT 1 FROM "+schema+".reprise_run WHERE id = 'r0' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	results := make(chan result, len(calls)+1)
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := s.SignalSend(ctx, &store.SignalSendParams{RunID: "r0", Name: "blocked"})
		results <- result{"blocked", err}
	})
	// Watched from another connection: within conn's transaction,
	// pg_stat_activity is the snapshot its first read took.
	watcher := connect(t, dsn)
	var blocked int
	var blockedErr error
	waitFor(t, func() bool {
		blockedErr = watcher.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", conn.PgConn().PID()).Scan(&blocked)
		return blockedErr == nil && blocked == 1
	}, func() string {
		return fmt.Sprintf("backends blocked by the lock: %d (%v), want 1", blocked, blockedErr)
	})
	for name, call := range calls {
		wg.Go(func() { results <- result{name, call()} })
	}
	waitFor(t, func() bool { return postgres.QueuedTransitions(s) == len(calls) },
		func() string {
			return fmt.Sprintf("%d transitions queued, want %d", postgres.QueuedTransitions(s), len(calls))
		})
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(results)
	got := map[string]error{}
	for r := range results {
		got[r.name] = r.err
	}
	if got["blocked"] != nil {
		t.Fatalf("the signal that kept the writer busy: %v", got["blocked"])
	}
	return got
}

// checkHistory checks the types of a run's events.
func checkHistory(t *testing.T, s *postgres.Store, id string, want ...store.EventType) {
	t.Helper()
	events, err := s.HistoryList(t.Context(), &store.HistoryListParams{RunID: id})
	if err != nil {
		t.Fatal(err)
	}
	var got []store.EventType
	for _, e := range events {
		got = append(got, e.Type)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("history of %s: %v, want %v", id, got, want)
	}
}

// waitFor polls cond until it holds, or fails the test after 30 s: CI
// runs every package at once under -race, engine processes among them.
func waitFor(t *testing.T, cond func() bool, state ...func() string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			for _, s := range state {
				t.Log(s())
			}
			t.Fatal("condition not met after 30s")
		case <-tick.C:
		}
	}
}

// TestMergedTransitions runs transitions of the same kinds as one group,
// whose reads ahead and writes go as one statement per kind: one failure
// with a stale token among retries at once is refused and changes nothing,
// while the others are recorded, each as it would be alone; then the ends
// of runs (advances with handed results, a cancel) are merged alike.
func TestMergedTransitions(t *testing.T) {
	t.Parallel()
	dsn, schema := testSchema(t)
	s := openOn(t, dsn, &postgres.Options{Schema: schema, Writers: 1})
	ctx := t.Context()
	runs := []string{"r1", "r2", "r3", "r4", "r5"}
	tokens := map[string]int64{}
	tasks := map[string]*store.Task{}
	for _, id := range append([]string{"r0"}, runs...) {
		lease, _, err := s.RunCreate(ctx, &store.RunCreateParams{ID: id, Workflow: "wf", Owner: "e1", LeaseTTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		tokens[id] = lease.Token
		if id == "r0" {
			continue
		}
		adv := must[*store.Advanced](t)(s.RunAdvance(ctx, &store.RunAdvanceParams{
			RunID: id, Token: lease.Token, LeaseOwner: "w1", LeaseTTL: time.Hour,
			Steps: []store.StepSpec{{Position: 1, Name: "s", Input: json.RawMessage(`"in"`), IdempotencyKey: id + "/1",
				PolicyText: "[retry: 3]", Policy: json.RawMessage(`{}`), Lease: true}},
		}))
		tasks[id] = adv.Tasks[0]
	}
	before := postgres.Merged(s)

	nexts := map[string]*store.Task{}
	var mu sync.Mutex
	fail := func(run string, token int64) func() error {
		return func() error {
			o, err := s.TaskFail(ctx, &store.TaskFailParams{
				TaskID: tasks[run].ID, Token: token, Error: store.ErrorInfo{Type: "E", Message: run},
				Retry: true, LeaseNext: true, LeaseOwner: "w2", LeaseTTL: time.Hour,
			})
			if err == nil {
				mu.Lock()
				nexts[run] = o.Next
				mu.Unlock()
			}
			return err
		}
	}
	got := inGroup(t, s, dsn, schema, map[string]func() error{
		"r1": fail("r1", tasks["r1"].Token),
		"r2": fail("r2", tasks["r2"].Token),
		"r3": fail("r3", tasks["r3"].Token+1), // stale
		"r4": fail("r4", tasks["r4"].Token),
		"r5": func() error {
			_, err := s.TaskComplete(ctx, &store.TaskCompleteParams{TaskID: tasks["r5"].ID, Token: tasks["r5"].Token, Output: json.RawMessage(`5`)})
			return err
		},
	})
	for _, run := range runs {
		if want := run != "r3"; (got[run] == nil) != want {
			t.Errorf("%s: %v, want success %v", run, got[run], want)
		}
	}
	if !errors.Is(got["r3"], store.ErrLeaseLost) {
		t.Errorf("r3 with a stale token: %v, want ErrLeaseLost", got["r3"])
	}
	if n := postgres.Merged(s) - before; n < 2 {
		t.Errorf("%d merged statements, want at least 2 (the failures' reads and writes)", n)
	}
	for _, run := range []string{"r1", "r2", "r4"} {
		checkHistory(t, s, run, store.EventRunStarted, store.EventStepScheduled, store.EventAttemptStarted,
			store.EventAttemptFailed, store.EventAttemptStarted)
		n := nexts[run]
		if n == nil || n.Attempt != 2 || n.Token != tasks[run].Token+1 || string(n.Input) != `"in"` || n.IdempotencyKey != run+"/1" {
			t.Errorf("%s: next attempt %+v", run, n)
			continue
		}
		if stored := must[*store.Task](t)(s.TaskGet(ctx, n.ID)); !reflect.DeepEqual(stored, asRead(n)) {
			t.Errorf("%s: stored task %+v, want %+v", run, stored, n)
		}
	}
	checkHistory(t, s, "r3", store.EventRunStarted, store.EventStepScheduled, store.EventAttemptStarted)
	if stored := must[*store.Task](t)(s.TaskGet(ctx, tasks["r3"].ID)); !reflect.DeepEqual(stored, asRead(tasks["r3"])) {
		t.Errorf("r3: task after the refused failure %+v, want %+v", stored, tasks["r3"])
	}
	checkHistory(t, s, "r5", store.EventRunStarted, store.EventStepScheduled, store.EventAttemptStarted,
		store.EventStepCompleted)
	if _, err := s.TaskGet(ctx, tasks["r5"].ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("r5: completed task: %v, want ErrNotFound", err)
	}
	if n := writersOf(t, dsn, schema, "type IN ('AttemptFailed', 'StepCompleted')"); n != 1 {
		t.Errorf("the group's outcomes were written by %d transactions, want 1", n)
	}

	// The ends: r1 and r2 complete with their handed results, r3 with a
	// stale one (refused), r4 is cancelled.
	before = postgres.Merged(s)
	finish := func(run string, token int64) func() error {
		return func() error {
			_, err := s.RunAdvance(ctx, &store.RunAdvanceParams{
				RunID: run, Token: tokens[run],
				Completed: []store.TaskCompleteParams{{TaskID: tasks[run].ID, Token: token, Output: json.RawMessage(`2`)}},
				Finish:    &store.RunFinish{Status: store.RunCompleted, Output: json.RawMessage(`"done"`)},
			})
			return err
		}
	}
	got = inGroup(t, s, dsn, schema, map[string]func() error{
		"r1": finish("r1", nexts["r1"].Token),
		"r2": finish("r2", nexts["r2"].Token),
		"r3": finish("r3", tasks["r3"].Token+1),
		"r4": func() error {
			_, err := s.RunCancel(ctx, &store.RunCancelParams{ID: "r4", Reason: "test"})
			return err
		},
	})
	if got["r1"] != nil || got["r2"] != nil || got["r4"] != nil || !errors.Is(got["r3"], store.ErrLeaseLost) {
		t.Errorf("ends: %v", got)
	}
	if n := postgres.Merged(s) - before; n < 2 {
		t.Errorf("%d merged statements, want at least 2 (the ends' reads and writes)", n)
	}
	for run, want := range map[string]store.RunStatus{"r1": store.RunCompleted, "r2": store.RunCompleted, "r3": store.RunRunning, "r4": store.RunCancelled} {
		r := must[*store.Run](t)(s.RunGet(ctx, run))
		if r.Status != want {
			t.Errorf("%s: %s, want %s", run, r.Status, want)
		}
		if want == store.RunCompleted && string(r.Output) != `"done"` {
			t.Errorf("%s: output %s", run, r.Output)
		}
	}
	for _, run := range []string{"r1", "r2"} {
		checkHistory(t, s, run, store.EventRunStarted, store.EventStepScheduled, store.EventAttemptStarted,
			store.EventAttemptFailed, store.EventAttemptStarted, store.EventStepCompleted, store.EventRunCompleted)
		if _, err := s.TaskGet(ctx, nexts[run].ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: task of an ended run: %v, want ErrNotFound", run, err)
		}
	}
	if _, err := s.TaskGet(ctx, tasks["r4"].ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("r4: task of a cancelled run: %v, want ErrNotFound", err)
	}
	if stored := must[*store.Task](t)(s.TaskGet(ctx, tasks["r3"].ID)); !reflect.DeepEqual(stored, asRead(tasks["r3"])) {
		t.Errorf("r3: task after the refused end %+v, want %+v", stored, tasks["r3"])
	}

	// First advances that lease their steps at once: one statement, whose
	// rows each advance reads its own tasks' ids from.
	before = postgres.Merged(s)
	calls := map[string]func() error{}
	leased := map[string][]*store.Task{}
	for _, run := range []string{"r6", "r7", "r8"} {
		lease, _, err := s.RunCreate(ctx, &store.RunCreateParams{ID: run, Workflow: "wf", Owner: "e1", LeaseTTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		calls[run] = func() error {
			var steps []store.StepSpec
			for pos := range 2 {
				steps = append(steps, store.StepSpec{Position: pos + 1, Name: "s", IdempotencyKey: fmt.Sprint(run, "/", pos+1),
					PolicyText: "[retry: 3]", Policy: json.RawMessage(`{}`), Lease: true})
			}
			adv, err := s.RunAdvance(ctx, &store.RunAdvanceParams{RunID: run, Token: lease.Token, LeaseOwner: "w1", LeaseTTL: time.Hour, Steps: steps})
			if err == nil {
				mu.Lock()
				leased[run] = adv.Tasks
				mu.Unlock()
			}
			return err
		}
	}
	got = inGroup(t, s, dsn, schema, calls)
	if n := postgres.Merged(s) - before; n < 2 {
		t.Errorf("%d merged statements, want at least 2 (the advances' reads and writes)", n)
	}
	seen := map[int64]bool{}
	for run := range calls {
		if err := got[run]; err != nil || len(leased[run]) != 2 {
			t.Errorf("%s: %v, %d tasks leased", run, err, len(leased[run]))
			continue
		}
		for _, task := range leased[run] {
			stored, err := s.TaskGet(ctx, task.ID)
			if err != nil || seen[task.ID] || stored.RunID != run || stored.Position != task.Position || stored.Token != 1 {
				t.Errorf("%s: leased task %+v, stored as %+v (%v)", run, task, stored, err)
			}
			seen[task.ID] = true
		}
	}
}

// writersOf counts the transactions that wrote the events where holds for.
func writersOf(t *testing.T, dsn, schema, where string) int {
	t.Helper()
	var n int
	err := connect(t, dsn).QueryRow(t.Context(), "SELECT count(DISTINCT xmin::text) FROM "+schema+".reprise_event WHERE "+where).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestHistoriesTogether reads several histories in one statement, as
// HistoryList calls that arrive together are read: each gets its own
// run's events after its own AfterSeq, a missing run ErrNotFound, a run
// read twice both; and many calls at once each get their own.
func TestHistoriesTogether(t *testing.T) {
	t.Parallel()
	s := openStore(t, nil)
	ctx := t.Context()
	for i := range 3 {
		id := fmt.Sprint("h", i)
		if _, _, err := s.RunCreate(ctx, &store.RunCreateParams{ID: id, Workflow: "wf"}); err != nil {
			t.Fatal(err)
		}
		for j := range i {
			if _, err := s.SignalSend(ctx, &store.SignalSendParams{RunID: id, Name: fmt.Sprint("s", j)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	ps := []store.HistoryListParams{
		{RunID: "h2"}, {RunID: "nope"}, {RunID: "h1", AfterSeq: 1}, {RunID: "h0", AfterSeq: 1},
		{RunID: "h2", AfterSeq: 2}, {RunID: "h1"},
	}
	events, errs := postgres.Histories(ctx, s, ps)
	want := []string{"RunStarted SignalReceived SignalReceived", "", "SignalReceived", "", "SignalReceived", "RunStarted SignalReceived"}
	for i, p := range ps {
		if p.RunID == "nope" {
			if !errors.Is(errs[i], store.ErrNotFound) {
				t.Errorf("read %d of a missing run: %v, want ErrNotFound", i, errs[i])
			}
			continue
		}
		if errs[i] != nil || types(events[i]) != want[i] || events[i] == nil {
			t.Errorf("read %d (%+v): %q (%v), want %q", i, p, types(events[i]), errs[i], want[i])
		}
		for _, e := range events[i] {
			if e.Seq <= p.AfterSeq {
				t.Errorf("read %d (%+v): event %d", i, p, e.Seq)
			}
		}
	}

	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			id := fmt.Sprint("h", i%3)
			got, err := s.HistoryList(ctx, &store.HistoryListParams{RunID: id})
			if err != nil || len(got) != i%3+1 {
				t.Errorf("history of %s: %d events (%v), want %d", id, len(got), err, i%3+1)
			}
		})
	}
	wg.Wait()
}

// TestMergedCreates creates runs as one group, whose inserts go ahead as
// one statement: each new run is created once, with its first advance
// when it has one; of an id given twice in the group, one call creates
// it and the other gets it as it is; an id that exists is returned
// unchanged.
func TestMergedCreates(t *testing.T) {
	t.Parallel()
	dsn, schema := testSchema(t)
	s := openOn(t, dsn, &postgres.Options{Schema: schema, Writers: 1})
	ctx := t.Context()
	for _, id := range []string{"r0", "old"} {
		if _, _, err := s.RunCreate(ctx, &store.RunCreateParams{ID: id, Workflow: "wf", Owner: "e1", LeaseTTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	before := postgres.Merged(s)
	type result struct {
		lease   store.RunLease
		created bool
	}
	var mu sync.Mutex
	results := map[string]result{}
	create := func(name, id string, first bool) func() error {
		return func() error {
			p := &store.RunCreateParams{ID: id, Workflow: "wf", Input: json.RawMessage(`"` + name + `"`), Owner: "e1", LeaseTTL: time.Hour}
			if first {
				p.First = &store.RunAdvanceParams{LeaseOwner: "w1", LeaseTTL: time.Hour, Steps: []store.StepSpec{{
					Position: 1, Name: "s", IdempotencyKey: id + "/1", PolicyText: "[retry: 3]", Policy: json.RawMessage(`{}`), Lease: true,
				}}}
			}
			lease, created, err := s.RunCreate(ctx, p)
			mu.Lock()
			results[name] = result{lease, created}
			mu.Unlock()
			return err
		}
	}
	got := inGroup(t, s, dsn, schema, map[string]func() error{
		"a":    create("a", "a", true),
		"b":    create("b", "b", true),
		"c":    create("c", "c", false),
		"dup1": create("dup1", "dup", false),
		"dup2": create("dup2", "dup", false),
		"old":  create("old", "old", false),
	})
	for name, err := range got {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The inserts go as one statement; the writes after them merge as far
	// as the reads in turn (of the existing ids) let them.
	if n := postgres.Merged(s) - before; n < 1 {
		t.Errorf("%d merged statements, want at least 1 (the inserts)", n)
	}
	for _, id := range []string{"a", "b"} {
		r := results[id]
		if !r.created || r.lease.Advanced == nil || len(r.lease.Advanced.Tasks) != 1 || r.lease.Run.Status != store.RunRunning {
			t.Errorf("%s: %+v", id, r)
			continue
		}
		checkHistory(t, s, id, store.EventRunStarted, store.EventStepScheduled, store.EventAttemptStarted)
		task := must[*store.Task](t)(s.TaskGet(ctx, r.lease.Advanced.Tasks[0].ID))
		if task.RunID != id || task.Token != 1 {
			t.Errorf("%s: leased task %+v", id, task)
		}
	}
	if r := results["c"]; !r.created || r.lease.Token != 1 {
		t.Errorf("c: %+v", r)
	}
	checkHistory(t, s, "c", store.EventRunStarted)
	d1, d2 := results["dup1"], results["dup2"]
	if d1.created == d2.created {
		t.Errorf("dup created by both or neither: %v, %v", d1.created, d2.created)
	}
	won := d1
	if d2.created {
		won = d2
	}
	stored := must[*store.Run](t)(s.RunGet(ctx, "dup"))
	if string(stored.Input) != string(won.lease.Run.Input) {
		t.Errorf("dup: stored input %s, created by the call with %s", stored.Input, won.lease.Run.Input)
	}
	checkHistory(t, s, "dup", store.EventRunStarted)
	if r := results["old"]; r.created || r.lease.Token != 0 || string(r.lease.Run.Input) != "" {
		t.Errorf("old: %+v, want the existing run, unchanged", r)
	}
	checkHistory(t, s, "old", store.EventRunStarted)
}
