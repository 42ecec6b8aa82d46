package postgres_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"reprise/postgres"
	"reprise/store"
)

// TestPathsAgree runs the same transitions, from many goroutines at once,
// on the grouped path with one writer (so that they run in groups, their
// reads ahead and their writes merged) and on the plain path, each on a
// clock that stands still, and checks that both leave every run with the
// same history and row, and return the same events.
func TestPathsAgree(t *testing.T) {
	t.Parallel()
	const goroutines, runs = 16, 6
	at := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
	now := func() time.Time { return at }
	type result struct {
		history map[string][]store.Event
		rows    map[string]*store.Run
		events  map[string][]store.Event // returned, by call
	}
	results := map[bool]result{}
	for _, plain := range []bool{false, true} {
		dsn, schema := testSchema(t)
		s := openOn(t, dsn, &postgres.Options{Schema: schema, Now: now, Writers: 1, Plain: plain})
		r := result{history: map[string][]store.Event{}, rows: map[string]*store.Run{}, events: map[string][]store.Event{}}
		var (
			mu sync.Mutex
			wg sync.WaitGroup
		)
		for g := range goroutines {
			wg.Go(func() {
				got, err := pathsWorkload(t, s, g, runs)
				if err != nil {
					t.Errorf("plain %v, goroutine %d: %v", plain, g, err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for k, v := range got {
					r.events[k] = v
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		if n := postgres.Merged(s); plain != (n == 0) {
			t.Errorf("plain %v: %d statements merged", plain, n)
		}
		for g := range goroutines {
			for i := range runs {
				ids := []string{pathsRun(g, i)}
				if i%2 == 0 {
					ids = append(ids, pathsRun(g, i)+"-child")
				}
				for _, id := range ids {
					history, err := s.HistoryList(t.Context(), &store.HistoryListParams{RunID: id})
					if err != nil {
						t.Fatalf("plain %v: history of %s: %v", plain, id, err)
					}
					r.history[id] = history
					r.rows[id] = must[*store.Run](t)(s.RunGet(t.Context(), id))
				}
			}
		}
		results[plain] = r
	}
	grouped, plain := results[false], results[true]
	for _, what := range []struct {
		name      string
		got, want any
	}{
		{"history", grouped.history, plain.history},
		{"run", grouped.rows, plain.rows},
		{"returned events", grouped.events, plain.events},
	} {
		g, p := reflect.ValueOf(what.got), reflect.ValueOf(what.want)
		if g.Len() != p.Len() {
			t.Errorf("%s: %d on the grouped path, %d on the plain one", what.name, g.Len(), p.Len())
		}
		for _, k := range p.MapKeys() {
			gj, _ := json.Marshal(g.MapIndex(k).Interface())
			pj, _ := json.Marshal(p.MapIndex(k).Interface())
			if string(gj) != string(pj) {
				t.Errorf("%s of %s on the grouped path:\n%s\non the plain path:\n%s", what.name, k, gj, pj)
			}
		}
	}
}

func pathsRun(g, i int) string { return fmt.Sprintf("g%d-r%d", g, i) }

// pathsWorkload makes runs runs of goroutine g go through their lives:
// created (every other one with its first advance), a step scheduled
// (leased at once or claimed), an attempt failed and retried (its next
// attempt leased at once, or claimed), the step completed, a signal, and
// the end: completed, with a handed result, or cancelled. Every other run
// starts a child, which its end cancels. It returns the events of each
// call, by call.
func pathsWorkload(t *testing.T, s *postgres.Store, g, runs int) (map[string][]store.Event, error) {
	ctx := t.Context()
	step, worker := fmt.Sprint("s", g), fmt.Sprint("w", g)
	got := map[string][]store.Event{}
	claim := func() (*store.Task, error) {
		tasks, err := s.TaskClaim(ctx, &store.TaskClaimParams{Owner: worker, LeaseTTL: time.Hour,
			Steps: []store.StepQuota{{Name: step, Limit: 1}}})
		if err == nil && len(tasks) != 1 {
			err = fmt.Errorf("claimed %d tasks", len(tasks))
		}
		if err != nil {
			return nil, err
		}
		return tasks[0], nil
	}
	for i := range runs {
		id := pathsRun(g, i)
		call := func(name string) string { return id + "/" + name }
		first := &store.RunAdvanceParams{LeaseOwner: worker, LeaseTTL: time.Hour, Steps: []store.StepSpec{{
			Position: 1, Name: step, Input: json.RawMessage(`{"n":1}`), IdempotencyKey: id + "/1",
			PolicyText: "[retry: 3]", Policy: json.RawMessage(`{}`), Lease: i%2 == 1,
		}}}
		if i%2 == 0 {
			first.Children = []store.ChildSpec{{Position: 2, ID: id + "-child", Workflow: "child", Input: json.RawMessage(`2`)}}
		}
		p := &store.RunCreateParams{ID: id, Workflow: "wf", Input: json.RawMessage(`{"run":"` + id + `"}`), Owner: "e", LeaseTTL: time.Hour}
		if i%2 == 1 {
			p.First = first
		}
		lease, _, err := s.RunCreate(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", id, err)
		}
		var task *store.Task
		if i%2 == 1 {
			got[call("create")] = lease.Advanced.Events
			task = lease.Advanced.Tasks[0]
		} else {
			first.RunID, first.Token = id, lease.Token
			adv, err := s.RunAdvance(ctx, first)
			if err != nil {
				return nil, fmt.Errorf("advance %s: %w", id, err)
			}
			got[call("advance")] = adv.Events
			if task, err = claim(); err != nil {
				return nil, fmt.Errorf("claim %s: %w", id, err)
			}
		}
		o, err := s.TaskFail(ctx, &store.TaskFailParams{TaskID: task.ID, Token: task.Token, Attempt: task.Attempt,
			Error: store.ErrorInfo{Type: "Flaky", Message: "again"}, Retry: true, Rule: "[retry: 3]",
			LeaseNext: i%2 == 1, LeaseOwner: worker, LeaseTTL: time.Hour})
		if err != nil {
			return nil, fmt.Errorf("fail %s: %w", id, err)
		}
		got[call("fail")] = o.Events
		if o.Next != nil {
			task = o.Next
		} else if task, err = claim(); err != nil {
			return nil, fmt.Errorf("claim %s again: %w", id, err)
		}
		done := store.TaskCompleteParams{TaskID: task.ID, Token: task.Token, Attempt: task.Attempt, Output: json.RawMessage(`"ok"`)}
		if i%3 != 1 {
			if o, err = s.TaskComplete(ctx, &done); err != nil {
				return nil, fmt.Errorf("complete %s: %w", id, err)
			}
			got[call("complete")] = o.Events
		}
		if o, err = s.SignalSend(ctx, &store.SignalSendParams{RunID: id, Name: "poke", Payload: json.RawMessage(`1`)}); err != nil {
			return nil, fmt.Errorf("signal %s: %w", id, err)
		}
		got[call("signal")] = o.Events
		switch i % 3 {
		case 0:
			if _, err := s.RunCancel(ctx, &store.RunCancelParams{ID: id, Reason: "test"}); err != nil {
				return nil, fmt.Errorf("cancel %s: %w", id, err)
			}
		default:
			end := &store.RunAdvanceParams{RunID: id, Token: lease.Token,
				Finish: &store.RunFinish{Status: store.RunCompleted, Output: json.RawMessage(`"done"`)}}
			if i%3 == 1 {
				end.Completed = []store.TaskCompleteParams{done}
			}
			adv, err := s.RunAdvance(ctx, end)
			if err != nil {
				return nil, fmt.Errorf("finish %s: %w", id, err)
			}
			got[call("finish")] = adv.Events
		}
	}
	return got, nil
}
