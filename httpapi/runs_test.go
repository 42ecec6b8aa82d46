package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"reprise"
	"reprise/retry"
	"reprise/store"
)

func TestStartRun(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Options{}, echo)
	status, body := s.call(t, "POST", "/v1/runs", `{"workflow":"echo","input":{"n":1},"id":"run-1"}`)
	if status != http.StatusCreated {
		t.Fatalf("start: %d %s", status, body)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "workflow", "status", "input", "output", "error", "created_at", "updated_at"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("run has no %q: %s", k, body)
		}
	}
	run := s.waitRun(t, "run-1")
	if run.Status != store.RunCompleted || string(run.Output) != `{"n":1}` {
		t.Errorf("run: %+v", run)
	}
	// The same id again: the existing run, 200, nothing new.
	status, body = s.call(t, "POST", "/v1/runs", `{"workflow":"echo","input":{"n":2},"id":"run-1"}`)
	if status != http.StatusOK || !strings.Contains(string(body), `"input":{"n":1}`) {
		t.Errorf("start again: %d %s", status, body)
	}
	run, created, err := s.c.StartRun(t.Context(), "echo", nil, "")
	if err != nil || !created || run.ID == "" {
		t.Fatalf("client start: %v %v %+v", err, created, run)
	}
	runs, err := s.c.ListRuns(t.Context(), &store.RunListParams{Workflow: "echo"})
	if err != nil || len(runs) != 2 {
		t.Errorf("list: %v %d", err, len(runs))
	}
}

func TestStartRunErrors(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Options{MaxBodyBytes: 100}, echo)
	for _, c := range []struct {
		body   string
		status int
		field  string
	}{
		{``, 400, "body"},
		{`{`, 400, "body"},
		{`{"workflow": "echo",}`, 400, "body"},
		{`[1]`, 400, "body"},
		{`"echo"`, 400, "body"},
		{`{"workflow": "echo"} {}`, 400, "body"},
		{`{"workflow": 1}`, 400, "workflow"},
		{`{"workflow": "echo", "bogus": 1}`, 400, "bogus"},
		{`{}`, 400, "workflow"},
		{`{"workflow": "echo", "step": "x"}`, 400, "step"},
		{`{"workflow": "nope"}`, 400, "workflow"},
		{`{"step": "nope"}`, 400, "step"},
		{`{"workflow": "echo", "id": "a b"}`, 400, "id"},
		{`{"workflow": "echo", "id": 7}`, 400, "id"},
		{`{"workflow": "echo", "input": "` + strings.Repeat("x", 100) + `"}`, 413, ""},
	} {
		s.wantProblem(t, "POST", "/v1/runs", c.body, c.status, c.field)
	}
	// A body that is not JSON by its type.
	req, err := http.NewRequest(http.MethodPost, s.url+"/v1/runs", strings.NewReader(`workflow=echo`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("form body: %d", resp.StatusCode)
	}
	// JSON is application/json, in UTF-8: not a type that starts so.
	for ct, want := range map[string]int{
		"application/jsonx":                    415,
		"application/json-patch+json":          415,
		"application/json; charset=utf-16":     415,
		"application/json; charset=latin1":     415,
		"application/json;;":                   415,
		"application/json; charset=UTF-8":      201,
		"Application/JSON":                     201,
		"application/json ; charset=\"utf-8\"": 201,
	} {
		if status, body := s.callAs(t, "POST", "/v1/runs", ct, `{"workflow": "echo"}`); status != want {
			t.Errorf("Content-Type %q: %d %s, want %d", ct, status, body, want)
		}
	}
}

func TestMethodsAndPaths(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Options{}, echo)
	p := s.wantProblem(t, "DELETE", "/v1/runs", "", 405, "")
	if !strings.Contains(p.Detail, "GET, HEAD, POST") {
		t.Errorf("405 detail: %q", p.Detail)
	}
	s.wantProblem(t, "GET", "/v1/runs/x/cancel", "", 405, "")
	s.wantProblem(t, "GET", "/v1/tasks/claim", "", 405, "")
	s.wantProblem(t, "GET", "/v2/runs", "", 404, "")
	s.wantProblem(t, "GET", "/v1/runs/nope", "", 404, "")
	s.wantProblem(t, "GET", "/v1/runs/nope/history", "", 404, "")
	s.wantProblem(t, "GET", "/v1/runs/a%20b", "", 400, "id")
	if status, body := s.call(t, "GET", "/healthz", ""); status != 200 || !strings.Contains(string(body), "ok") {
		t.Errorf("healthz: %d %s", status, body)
	}
	if _, err := s.c.GetRun(t.Context(), "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("client get of no run: %v", err)
	}
}

func TestListRuns(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Options{}, echo, sleeper)
	for i := range 5 {
		if _, _, err := s.c.StartRun(t.Context(), "echo", nil, fmt.Sprintf("e%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.c.StartRun(t.Context(), "sleeper", nil, "s0"); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		s.waitRun(t, fmt.Sprintf("e%d", i))
	}
	// Pages of two, by cursor, cover every echo run once.
	var ids []string
	p := &store.RunListParams{Workflow: "echo", Limit: 2}
	for range 10 {
		runs, next, err := s.c.ListRunsPage(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range runs {
			ids = append(ids, r.ID)
		}
		if next == "" {
			break
		}
		p.Before = next
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"e0", "e1", "e2", "e3", "e4"}) {
		t.Errorf("pages: %v", ids)
	}
	runs, err := s.c.ListRuns(t.Context(), &store.RunListParams{Status: store.RunRunning})
	if err != nil || len(runs) != 1 || runs[0].ID != "s0" {
		t.Errorf("running: %v %v", err, runs)
	}
	s.wantProblem(t, "GET", "/v1/runs?status=done", "", 400, "status")
	s.wantProblem(t, "GET", "/v1/runs?limit=0", "", 400, "limit")
	s.wantProblem(t, "GET", "/v1/runs?limit=x", "", 400, "limit")
	s.wantProblem(t, "GET", "/v1/runs?cursor=a%20b", "", 400, "cursor")
}

// TestListRunsByFailingStep lists a run held in a long backoff by the
// filters of its failing step, and refuses bad filters.
func TestListRunsByFailingStep(t *testing.T) {
	t.Parallel()
	unavailable := reprise.NewStep("flaky.call", func(context.Context, int) (int, error) {
		return 0, retry.NewError("HTTP503", "service unavailable")
	}, reprise.WithPolicyText("[retry: 3, backoff: 1h]"))
	wf := reprise.NewWorkflow("calls", func(ctx context.Context, n int) (int, error) {
		return reprise.Step(ctx, unavailable, n)
	})
	s := newTestServer(t, Options{}, echo, wf, unavailable)
	if _, _, err := s.c.StartRun(t.Context(), "calls", json.RawMessage(`1`), "c1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.c.StartRun(t.Context(), "echo", nil, "e1"); err != nil {
		t.Fatal(err)
	}
	s.waitRun(t, "e1")
	list := func(p store.RunListParams) []string {
		t.Helper()
		runs, err := s.c.ListRuns(t.Context(), &p)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range runs {
			ids = append(ids, r.ID)
		}
		return ids
	}
	// The first attempt fails at once; its retry is an hour away.
	for deadline := time.Now().Add(10 * time.Second); !slices.Equal(list(store.RunListParams{Retrying: true}), []string{"c1"}); {
		if time.Now().After(deadline) {
			t.Fatal("run c1 is not listed as retrying")
		}
		time.Sleep(5 * time.Millisecond)
	}
	hourAgo := time.Now().Add(-time.Hour)
	for _, c := range []struct {
		p    store.RunListParams
		want []string
	}{
		{store.RunListParams{Step: "flaky.call"}, []string{"c1"}},
		{store.RunListParams{ErrorType: "HTTP503", Retrying: true}, []string{"c1"}},
		{store.RunListParams{ErrorType: "HTTP500"}, nil},
		{store.RunListParams{CreatedSince: hourAgo}, []string{"e1", "c1"}},
		{store.RunListParams{CreatedUntil: hourAgo}, nil},
	} {
		if got := list(c.p); !slices.Equal(got, c.want) {
			t.Errorf("ListRuns(%+v) = %v, want %v", c.p, got, c.want)
		}
	}
	s.wantProblem(t, "GET", "/v1/runs?since=yesterday", "", 400, "since")
	s.wantProblem(t, "GET", "/v1/runs?step=a&step=b", "", 400, "step")
	s.wantProblem(t, "GET", "/v1/runs?since=1h&until=2h", "", 400, "until")
	s.wantProblem(t, "GET", "/v1/runs?error_type="+strings.Repeat("x", 201), "", 400, "error_type")
}

// gate is a step that waits until released.
func gate(release <-chan struct{}) *reprise.StepDef[json.RawMessage, json.RawMessage] {
	return reprise.NewRawStep("gate", func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
		select {
		case <-release:
			return json.RawMessage(`"opened"`), nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	})
}

var gated = reprise.NewWorkflow("gated", func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
	return reprise.Call[json.RawMessage](ctx, "gate", in)
})

func TestLongPolls(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	s := newTestServer(t, Options{}, gated, gate(release))
	if _, _, err := s.c.StartRun(t.Context(), "gated", nil, "g"); err != nil {
		t.Fatal(err)
	}
	// Without wait: at once.
	events, err := s.c.History(t.Context(), "g")
	if err != nil || len(events) == 0 || events[0].Type != store.EventRunStarted {
		t.Fatalf("history: %v %v", err, events)
	}
	// Wait until the attempt started, following the history.
	last := events[len(events)-1].Seq
	for !slices.ContainsFunc(events, func(e store.Event) bool { return e.Type == store.EventAttemptStarted }) {
		more, err := s.c.WaitHistory(t.Context(), "g", last, 5*time.Second)
		if err != nil || len(more) == 0 {
			t.Fatalf("wait history after %d: %v %v", last, err, more)
		}
		events = append(events, more...)
		last = more[len(more)-1].Seq
	}
	// Nothing happens: the wait runs out and answers no events.
	start := time.Now()
	more, err := s.c.WaitHistory(t.Context(), "g", last, 200*time.Millisecond)
	if err != nil || len(more) != 0 || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("idle wait: %v %v after %v", err, more, time.Since(start))
	}
	// A change ends the wait of the run at once.
	time.AfterFunc(100*time.Millisecond, func() { close(release) })
	start = time.Now()
	_, err = s.c.WaitRun(t.Context(), "g", 20*time.Second)
	if err != nil || time.Since(start) > 10*time.Second {
		t.Fatalf("wait run: %v after %v", err, time.Since(start))
	}
	run := s.waitRun(t, "g")
	if run.Status != store.RunCompleted || string(run.Output) != `"opened"` {
		t.Errorf("run: %+v", run)
	}
	// A finished run answers a wait at once.
	start = time.Now()
	if _, err := s.c.WaitHistory(t.Context(), "g", 1000, 10*time.Second); err != nil || time.Since(start) > 5*time.Second {
		t.Errorf("wait on finished: %v after %v", err, time.Since(start))
	}
	s.wantProblem(t, "GET", "/v1/runs/g?wait=soon", "", 400, "wait")
	s.wantProblem(t, "GET", "/v1/runs/g/history?wait=-1s", "", 400, "wait")
	s.wantProblem(t, "GET", "/v1/runs/g/history?after=x", "", 400, "after")
}

func TestCancelRun(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Options{}, sleeper, echo)
	if _, _, err := s.c.StartRun(t.Context(), "sleeper", nil, "s"); err != nil {
		t.Fatal(err)
	}
	status, body := s.call(t, "POST", "/v1/runs/s/cancel", `{"reason":"testing"}`)
	if status != 200 || !strings.Contains(string(body), `"status":"cancelled"`) {
		t.Fatalf("cancel: %d %s", status, body)
	}
	s.wantProblem(t, "POST", "/v1/runs/s/cancel", "", 409, "")
	if err := s.c.CancelRun(t.Context(), "s", "again"); !errors.Is(err, store.ErrRunFinished) {
		t.Errorf("client cancel of a cancelled run: %v", err)
	}
	s.wantProblem(t, "POST", "/v1/runs/nope/cancel", "", 404, "")
	s.wantProblem(t, "POST", "/v1/runs/s/cancel", `{"why":"x"}`, 400, "why")
	events, err := s.c.History(t.Context(), "s")
	if err != nil || events[len(events)-1].Type != store.EventRunCancelled || events[len(events)-1].Reason != "testing" {
		t.Errorf("history: %v %+v", err, events)
	}
}

// TestActionTextBounds: a signal's name, a cancel's reason and a
// redrive's by longer than the engine's bounds are 400 on their field,
// and change nothing.
func TestActionTextBounds(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Options{}, sleeper)
	if _, _, err := s.c.StartRun(t.Context(), "sleeper", nil, "s"); err != nil {
		t.Fatal(err)
	}
	long := func(n int) string { return strings.Repeat("x", n) }
	s.wantProblem(t, "POST", "/v1/runs/s/signals", `{"name":"`+long(reprise.MaxSignalName+1)+`"}`, 400, "name")
	s.wantProblem(t, "POST", "/v1/runs/s/signals", `{"payload":1}`, 400, "name")
	s.wantProblem(t, "POST", "/v1/runs/s/cancel", `{"reason":"`+long(reprise.MaxReason+1)+`"}`, 400, "reason")
	s.wantProblem(t, "POST", "/v1/runs/s/redrive", `{"by":"`+long(reprise.MaxReason+1)+`"}`, 400, "by")
	events, err := s.c.History(t.Context(), "s")
	if err != nil || len(events) == 0 || events[len(events)-1].Type.EndsRun() || events[len(events)-1].Type == store.EventSignalReceived {
		t.Fatalf("the run changed: %v %+v", err, events)
	}
	if status, body := s.call(t, "POST", "/v1/runs/s/signals", `{"name":"`+long(reprise.MaxSignalName)+`"}`); status != http.StatusAccepted {
		t.Fatalf("a name of the longest length: %d %s", status, body)
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Options{Token: "sesame"}, echo)
	// The scheme's case does not matter (HTTP's rule); the token's does.
	for h, want := range map[string]int{
		"": 401, "Bearer nope": 401, "sesame": 401, "Bearer sesame2": 401, "Bearer Sesame": 401, "Bearersesame": 401,
		"Basic sesame": 401, "bearer sesame": 200, "BEARER sesame": 200,
	} {
		req, err := http.NewRequest(http.MethodGet, s.url+"/v1/runs", nil)
		if err != nil {
			t.Fatal(err)
		}
		if h != "" {
			req.Header.Set("Authorization", h)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want || want == 401 && resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("Authorization %q: %d, want %d", h, resp.StatusCode, want)
		}
	}
	if status, _ := s.call(t, "GET", "/v1/runs", ""); status != 200 {
		t.Errorf("with the token: %d", status)
	}
	resp, err := http.Get(s.url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("healthz without a token: %d", resp.StatusCode)
	}
	wrong, _ := NewClient(s.url, "nope")
	if _, err := wrong.ListRuns(t.Context(), nil); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("client with a wrong token: %v", err)
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Options{}, echo)
	if _, _, err := s.c.StartRun(t.Context(), "echo", nil, "m"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.c.StartRun(t.Context(), "echo", nil, "m"); err != nil {
		t.Fatal(err)
	}
	status, body := s.call(t, "GET", "/metrics", "")
	if status != 200 || !strings.Contains(string(body), "\nreprise_api_runs_started_total 1\n") ||
		!strings.Contains(string(body), "# TYPE reprise_api_tasks_claimed_total counter") {
		t.Errorf("metrics: %d %s", status, body)
	}
}

func TestNewHandlerOptions(t *testing.T) {
	t.Parallel()
	if _, err := NewHandler(nil, nil, Options{MaxBodyBytes: -1}); err == nil {
		t.Error("negative MaxBodyBytes accepted")
	}
}

// TestWaitRunSeesAQuickFinish: a run that finishes between the wait's
// first look and its baseline still ends the wait at once (it used to
// wait the whole wait).
func TestWaitRunSeesAQuickFinish(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Options{}, echo)
	for range 30 {
		run, _, err := s.c.StartRun(t.Context(), "echo", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for !run.Status.Final() {
			if run, err = s.c.WaitRun(t.Context(), run.ID, 20*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("run %s: the wait took %v", run.ID, d)
		}
	}
}
