package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"reprise"
	"reprise/postgres"
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
		lease, _, err := s.RunCreate(ctx, &reprise.RunCreateParams{ID: id, Workflow: "wf", Owner: "e1", LeaseTTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		tokens[id] = lease.Token
	}
	step := func(pos int) []reprise.StepSpec {
		return []reprise.StepSpec{{Position: pos, Name: "s", IdempotencyKey: fmt.Sprint("k", pos), PolicyText: "[retry: 0]", Policy: json.RawMessage(`{}`)}}
	}
	must[*reprise.Advanced](t)(s.RunAdvance(ctx, &reprise.RunAdvanceParams{RunID: "r3", Token: tokens["r3"], Steps: step(1)}))

	type result struct {
		name string
		err  error
	}
	// group runs the transitions as one group: the single writer is busy
	// with a signal to r0 until the test's own transaction, which holds
	// r0's row, ends.
	group := func(calls map[string]func() error) map[string]error {
		t.Helper()
		conn := connect(t, dsn)
		if _, err := conn.Exec(ctx, "BEGIN; SELECT 1 FROM "+schema+".reprise_run WHERE id = 'r0' FOR UPDATE"); err != nil {
			t.Fatal(err)
		}
		results := make(chan result, len(calls)+1)
		var wg sync.WaitGroup
		wg.Go(func() {
			_, err := s.SignalSend(ctx, &reprise.SignalSendParams{RunID: "r0", Name: "blocked"})
			results <- result{"blocked", err}
		})
		waitFor(t, func() bool {
			var n int
			err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", conn.PgConn().PID()).Scan(&n)
			return err == nil && n == 1
		})
		for name, call := range calls {
			wg.Go(func() { results <- result{name, call()} })
		}
		waitFor(t, func() bool { return postgres.QueuedTransitions(s) == len(calls) })
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
	signal := func(run, name string) func() error {
		return func() error {
			_, err := s.SignalSend(ctx, &reprise.SignalSendParams{RunID: run, Name: name})
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
	xmins := func(name string) int { return writers("data->>'step' = $1", name) }

	got := group(map[string]func() error{
		"one":   signal("r1", "one"),
		"two":   signal("r2", "two"),
		"three": signal("r1", "three"),
		"lost": func() error {
			_, err := s.RunAdvance(ctx, &reprise.RunAdvanceParams{RunID: "r2", Token: tokens["r2"] + 1, Steps: step(1)})
			return err
		},
		"missing": signal("nope", "missing"),
	})
	for name, want := range map[string]error{"one": nil, "two": nil, "three": nil, "lost": reprise.ErrLeaseLost, "missing": reprise.ErrNotFound} {
		if !errors.Is(got[name], want) || want == nil && got[name] != nil {
			t.Errorf("%s: %v, want %v", name, got[name], want)
		}
	}
	for _, name := range []string{"one", "two", "three"} {
		if n := xmins(name); n != 1 {
			t.Errorf("signal %s written by %d transactions", name, n)
		}
	}
	if shared := writers("data->>'step' IN ('one', 'two', 'three')"); shared != 1 {
		t.Errorf("the group's signals were written by %d transactions, want 1", shared)
	}
	checkHistory(t, s, "r2", reprise.EventRunStarted, reprise.EventSignalReceived)

	// Position 1 of r3 is taken: its insert fails in the group's write
	// pipeline, after the signals before it were sent.
	got = group(map[string]func() error{
		"four": signal("r1", "four"),
		"dup": func() error {
			_, err := s.RunAdvance(ctx, &reprise.RunAdvanceParams{RunID: "r3", Token: tokens["r3"], Steps: step(1)})
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
	checkHistory(t, s, "r3", reprise.EventRunStarted, reprise.EventStepScheduled)
	checkHistory(t, s, "r1", reprise.EventRunStarted, reprise.EventSignalReceived, reprise.EventSignalReceived, reprise.EventSignalReceived)

	// Advances read their runs ahead, all in the group's first round
	// trip; the second advance of r2 read r2 before the first's writes,
	// and must read it again after them, in the same transaction.
	advance := func(run string, pos int) func() error {
		return func() error {
			_, err := s.RunAdvance(ctx, &reprise.RunAdvanceParams{RunID: run, Token: tokens[run], Steps: step(pos)})
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
	checkHistory(t, s, "r2", reprise.EventRunStarted, reprise.EventSignalReceived, reprise.EventSignalReceived,
		reprise.EventStepScheduled, reprise.EventStepScheduled)
}

// checkHistory checks the types of a run's events.
func checkHistory(t *testing.T, s *postgres.Store, id string, want ...reprise.EventType) {
	t.Helper()
	events, err := s.HistoryList(t.Context(), &reprise.HistoryListParams{RunID: id})
	if err != nil {
		t.Fatal(err)
	}
	var got []reprise.EventType
	for _, e := range events {
		got = append(got, e.Type)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("history of %s: %v, want %v", id, got, want)
	}
}

// waitFor polls cond until it holds, or fails the test after 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatal("condition not met after 10s")
		case <-tick.C:
		}
	}
}
