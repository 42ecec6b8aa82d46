package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"reprise/httpstep"
	"reprise/store"
)

func TestSteps(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var req httpstep.Request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Errorf("decode the step's request: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if _, err := w.Write([]byte(`{"success": true, "output": {"got": ` + string(req.Input) + `}}`)); err != nil {
			t.Errorf("answer the step: %v", err)
		}
	}))
	defer endpoint.Close()
	s := newTestServer(t, Options{})
	status, body := s.call(t, "POST", "/v1/steps", `{"name":"charge","kind":"http","url":"`+endpoint.URL+`","policy":"[retry: 2, backoff: 10ms]"}`)
	if status != 201 || !strings.Contains(string(body), `"policy":"[retry: 2, backoff: 10ms]"`) {
		t.Fatalf("register: %d %s", status, body)
	}
	// Again, with a JSON policy: a new version.
	status, body = s.call(t, "POST", "/v1/steps", `{"name":"charge","kind":"http","url":"`+endpoint.URL+`","policy":{"max_retries":1,"backoff":10}}`)
	if status != 201 || !strings.Contains(string(body), `"version":2`) {
		t.Fatalf("register again: %d %s", status, body)
	}
	// The same again: nothing new.
	status, body = s.call(t, "POST", "/v1/steps", `{"name":"charge","kind":"http","url":"`+endpoint.URL+`","policy":"[retry: 1, backoff: 10ms]"}`)
	if status != 200 || !strings.Contains(string(body), `"version":2`) {
		t.Fatalf("register the same again: %d %s", status, body)
	}
	if err := s.c.RegisterStep(t.Context(), Step{Name: "work", Kind: KindPull}); err != nil {
		t.Fatal(err)
	}
	steps, err := s.c.ListSteps(t.Context())
	if err != nil || len(steps) != 2 || steps[0].Name != "charge" || steps[1].Kind != KindPull {
		t.Errorf("steps: %v %+v", err, steps)
	}
	run, _, err := s.c.StartStep(t.Context(), "charge", json.RawMessage(`42`), "c1")
	if err != nil {
		t.Fatal(err)
	}
	run = s.waitRun(t, run.ID)
	if run.Status != store.RunCompleted || string(run.Output) != `{"got":42}` || calls.Load() != 1 {
		t.Errorf("one-step run: %+v, %d calls", run, calls.Load())
	}
	for _, c := range []struct{ body, field string }{
		{`{"kind":"pull"}`, "name"},
		{`{"name":"a b","kind":"pull"}`, "name"},
		{`{"name":"x"}`, "kind"},
		{`{"name":"x","kind":"grpc"}`, "kind"},
		{`{"name":"x","kind":"http"}`, "url"},
		{`{"name":"x","kind":"http","url":"ftp://h/x"}`, "url"},
		{`{"name":"x","kind":"pull","url":"http://h/x"}`, "url"},
		{`{"name":"x","kind":"pull","policy":"[retry: -1x]"}`, "policy"},
		{`{"name":"x","kind":"pull","policy":{"max_retries":"3"}}`, "policy"},
		{`{"name":"x","kind":"pull","policy":7}`, "policy"},
		{`{"name":"x","kind":"pull","timeout":7}`, "timeout"},
	} {
		s.wantProblem(t, "POST", "/v1/steps", c.body, 400, c.field)
	}
	s.wantProblem(t, "PUT", "/v1/steps", `{}`, 405, "")
}

func TestPullTasks(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Options{}, echo)
	ctx := t.Context()
	if err := s.c.RegisterStep(ctx, Step{Name: "work", Kind: KindPull, Policy: "[retry: 3, backoff: 10ms] [timeout: 1m]"}); err != nil {
		t.Fatal(err)
	}
	if err := s.c.RegisterStep(ctx, Step{Name: "web", Kind: KindHTTP, URL: "http://127.0.0.1:1/"}); err != nil {
		t.Fatal(err)
	}
	// Nothing to claim: an empty list after the wait.
	start := time.Now()
	tasks, err := s.c.Claim(ctx, ClaimParams{Worker: "w1", Steps: []string{"work"}, Wait: 100 * time.Millisecond})
	if err != nil || len(tasks) != 0 || time.Since(start) < 90*time.Millisecond {
		t.Fatalf("empty claim: %v %v after %v", err, tasks, time.Since(start))
	}
	if _, _, err := s.c.StartStep(ctx, "work", json.RawMessage(`{"x":1}`), "p1"); err != nil {
		t.Fatal(err)
	}
	tasks, err = s.c.Claim(ctx, ClaimParams{Worker: "w1", Steps: []string{"work"}, Max: 5, Wait: 5 * time.Second})
	if err != nil || len(tasks) != 1 {
		t.Fatalf("claim: %v %+v", err, tasks)
	}
	task := tasks[0]
	if task.RunID != "p1" || task.Step != "work" || task.Attempt != 1 || task.IdempotencyKey == "" ||
		string(task.Input) != `{"x":1}` || task.Deadline.IsZero() || task.LeaseUntil.IsZero() {
		t.Errorf("task: %+v", task)
	}
	until, err := s.c.Heartbeat(ctx, task.ID, task.Token)
	if err != nil || until.Before(task.LeaseUntil) {
		t.Errorf("heartbeat: %v %v (was %v)", err, until, task.LeaseUntil)
	}
	// A retryable failure: the policy retries; the old token is stale.
	retryable := true
	if err := s.c.Fail(ctx, task.ID, task.Token, httpstep.Report{Type: "Busy", Message: "later", Retryable: &retryable}); err != nil {
		t.Fatal(err)
	}
	if err := s.c.Complete(ctx, task.ID, task.Token, nil); !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("complete with a stale token: %v", err)
	}
	tasks, err = s.c.Claim(ctx, ClaimParams{Worker: "w2", Steps: []string{"work"}, Wait: 5 * time.Second})
	if err != nil || len(tasks) != 1 || tasks[0].Attempt != 2 || tasks[0].IdempotencyKey != task.IdempotencyKey {
		t.Fatalf("claim the retry: %v %+v", err, tasks)
	}
	if err := s.c.Complete(ctx, tasks[0].ID, tasks[0].Token, json.RawMessage(`"done"`)); err != nil {
		t.Fatal(err)
	}
	run := s.waitRun(t, "p1")
	if run.Status != store.RunCompleted || string(run.Output) != `"done"` {
		t.Errorf("run: %+v", run)
	}
	events, _ := s.c.History(ctx, "p1")
	var failed *store.Event
	for i := range events {
		if events[i].Type == store.EventAttemptFailed {
			failed = &events[i]
		}
	}
	if failed == nil || failed.Error.Type != "Busy" || failed.RetryAt.IsZero() {
		t.Errorf("history: %+v", events)
	}

	// A permanent failure fails the run.
	if _, _, err := s.c.StartStep(ctx, "work", nil, "p2"); err != nil {
		t.Fatal(err)
	}
	tasks, err = s.c.Claim(ctx, ClaimParams{Worker: "w1", Steps: []string{"work"}, Wait: 5 * time.Second})
	if err != nil || len(tasks) != 1 {
		t.Fatalf("claim: %v %+v", err, tasks)
	}
	if err := s.c.Fail(ctx, tasks[0].ID, tasks[0].Token, httpstep.Report{Type: "Invalid", Message: "no"}); err != nil {
		t.Fatal(err)
	}
	if run := s.waitRun(t, "p2"); run.Status != store.RunFailed {
		t.Errorf("run: %+v", run)
	}

	for _, c := range []struct {
		path, body string
		status     int
		field      string
	}{
		{"/v1/tasks/claim", `{"worker":"` + strings.Repeat("w", 201) + `","steps":["work"]}`, 400, "worker"},
		{"/v1/tasks/claim", `{"worker":7,"steps":["work"]}`, 400, "worker"},
		{"/v1/tasks/claim", `{"worker":"w"}`, 400, "steps"},
		{"/v1/tasks/claim", `{"worker":"w","steps":["nope"]}`, 400, "steps.0"},
		{"/v1/tasks/claim", `{"worker":"w","steps":["work","web"]}`, 400, "steps.1"},
		{"/v1/tasks/claim", `{"worker":"w","steps":["work"],"max":1000}`, 400, "max"},
		{"/v1/tasks/claim", `{"worker":"w","steps":["work"],"wait":"soon"}`, 400, "wait"},
		{"/v1/tasks/claim", `{"worker":"w","steps":"work"}`, 400, "steps"},
		{"/v1/tasks/claim", `{"worker":"w","steps":[1]}`, 400, "steps.0"},
		{"/v1/tasks/x/complete", `{"token":1}`, 400, "id"},
		{"/v1/tasks/1/complete", `{}`, 400, "token"},
		{"/v1/tasks/1/complete", `{"token":"1"}`, 400, "token"},
		{"/v1/tasks/999/complete", `{"token":1}`, 404, ""},
		{"/v1/tasks/1/fail", `{"token":1}`, 400, "error"},
		{"/v1/tasks/1/fail", `{"token":1,"error":{"message":"x"}}`, 400, "error.type"},
		{"/v1/tasks/1/fail", `{"token":1,"error":{"type":"X","retry_after_ms":-1}}`, 400, "error.retry_after_ms"},
		{"/v1/tasks/1/fail", `{"token":1,"error":{"type":"X","retryable":"yes"}}`, 400, "error.retryable"},
		{"/v1/tasks/999/fail", `{"token":1,"error":{"type":"X"}}`, 404, ""},
		{"/v1/tasks/1/heartbeat", `{"token":0}`, 400, "token"},
		{"/v1/tasks/999/heartbeat", `{"token":1}`, 404, ""},
		{"/v1/tasks/0/heartbeat", `{"token":1}`, 400, "id"},
	} {
		s.wantProblem(t, "POST", c.path, c.body, c.status, c.field)
	}
}

// TestPullWrites checks a claim without a worker's name, and that a worker
// that sends a completion or a failure again, with the same token and the
// same result (its first answer lost), gets the same answer, while another
// result, an old token or a task that never was do not.
func TestPullWrites(t *testing.T) {
	t.Parallel()
	for _, kind := range testStores() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			testPullWrites(t, kind)
		})
	}
}

func testPullWrites(t *testing.T, kind string) {
	s := newTestServerOn(t, kind, Options{})
	ctx := t.Context()
	if err := s.c.RegisterStep(ctx, Step{Name: "work", Kind: KindPull, Policy: "[retry: 3, backoff: 10ms]"}); err != nil {
		t.Fatal(err)
	}
	claim := func() Task {
		t.Helper()
		status, body := s.call(t, "POST", "/v1/tasks/claim", `{"steps":["work"],"wait":"10s"}`)
		var out claimList
		if err := json.Unmarshal(body, &out); status != 200 || err != nil || len(out.Tasks) != 1 {
			t.Fatalf("claim: %d %s", status, body)
		}
		return out.Tasks[0]
	}
	write := func(task Task, verb, body string, want int) {
		t.Helper()
		path := fmt.Sprintf("/v1/tasks/%d/%s", task.ID, verb)
		if status, b := s.call(t, "POST", path, body); status != want {
			t.Errorf("POST %s %s: %d %s, want %d", path, body, status, b, want)
		}
	}
	tok := func(task Task, rest string) string {
		if rest == "" {
			return fmt.Sprintf(`{"token":%d}`, task.Token)
		}
		return fmt.Sprintf(`{"token":%d,%s}`, task.Token, rest)
	}

	if _, _, err := s.c.StartStep(ctx, "work", json.RawMessage(`{"x":1}`), "w1"); err != nil {
		t.Fatal(err)
	}
	first := claim()
	busy := `"error":{"type":"Busy","message":"later","retryable":true}`
	write(first, "fail", tok(first, busy), 200)
	write(first, "fail", tok(first, busy), 200)                                                         // again
	write(first, "fail", tok(first, `"error":{"type":"Busy","message":"other","retryable":true}`), 409) // not the same
	second := claim()
	if second.ID != first.ID || second.Attempt != 2 {
		t.Fatalf("second claim: %+v after %+v", second, first)
	}
	write(first, "fail", tok(first, busy), 200) // again, after the retry was claimed
	write(first, "heartbeat", tok(first, ""), 409)
	write(second, "complete", tok(second, `"output":{"a":1,"b":[1,2]}`), 200)
	write(second, "complete", tok(second, `"output":{ "b": [1, 2], "a": 1.0 }`), 200) // the same JSON
	write(second, "complete", tok(second, `"output":{"a":2}`), 409)
	write(first, "complete", tok(first, `"output":{"a":1,"b":[1,2]}`), 409) // attempt 1 failed
	write(second, "fail", tok(second, busy), 409)
	write(second, "heartbeat", tok(second, ""), 409)
	if run := s.waitRun(t, "w1"); run.Status != store.RunCompleted || string(run.Output) != `{"a":1,"b":[1,2]}` {
		t.Errorf("run: %+v", run)
	}
	events, err := s.c.History(ctx, "w1")
	if err != nil {
		t.Fatal(err)
	}
	var workers []string
	failed, completed := 0, 0
	for _, e := range events {
		switch e.Type {
		case store.EventAttemptStarted:
			workers = append(workers, e.Worker)
		case store.EventAttemptFailed:
			failed++
		case store.EventStepCompleted:
			completed++
		}
	}
	if len(workers) != 2 || !strings.HasPrefix(workers[0], "pull@127.0.0.1:") || failed != 1 || completed != 1 {
		t.Errorf("history: workers %q, %d failed, %d completed, want 2 workers pull@ADDR, 1, 1", workers, failed, completed)
	}

	// A failure for good, sent twice.
	if _, _, err := s.c.StartStep(ctx, "work", nil, "w2"); err != nil {
		t.Fatal(err)
	}
	task := claim()
	write(task, "fail", tok(task, `"error":{"type":"Invalid"}`), 200)
	write(task, "fail", tok(task, `"error":{"type":"Invalid"}`), 200)
	write(task, "complete", tok(task, `"output":null`), 409)
	if run := s.waitRun(t, "w2"); run.Status != store.RunFailed {
		t.Errorf("run: %+v", run)
	}
	// A completion without output is null, again.
	if _, _, err := s.c.StartStep(ctx, "work", nil, "w3"); err != nil {
		t.Fatal(err)
	}
	task = claim()
	write(task, "complete", fmt.Sprintf(`{"token":%d}`, task.Token), 200)
	write(task, "complete", tok(task, `"output":null`), 200)

	// No such task: 404 for every write.
	gone := Task{ID: task.ID + 1000, Token: 1}
	write(gone, "complete", tok(gone, `"output":null`), 404)
	write(gone, "fail", tok(gone, `"error":{"type":"X"}`), 404)
	write(gone, "heartbeat", tok(gone, ""), 404)

	status, body := s.call(t, "GET", "/metrics", "")
	for _, want := range []string{"reprise_api_tasks_completed_total 2\n", "reprise_api_tasks_failed_total 2\n"} {
		if status != 200 || !strings.Contains(string(body), want) {
			t.Errorf("metrics: want %q in %s", want, body)
		}
	}
}
