package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"

	"reprise"
	"reprise/store"
)

// childWorkflow waits for the signal "go" and returns its payload;
// parentWorkflow runs it as a child and returns what it returns.
var (
	childWorkflow = reprise.NewWorkflow("child", func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
		return reprise.WaitSignal[json.RawMessage](ctx, "go").Get(ctx)
	})
	parentWorkflow = reprise.NewWorkflow("parent", func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
		return reprise.Child(ctx, childWorkflow, in).Get(ctx)
	})
)

// startChild starts a parent run of id and returns the id of its child,
// once the parent has started it.
func startChild(t *testing.T, s *testServer, id string) string {
	t.Helper()
	if _, _, err := s.c.StartRun(t.Context(), "parent", json.RawMessage(`{"n":1}`), id); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// The first read takes the history there is; the next ones wait for
	// the events after it.
	events, err := s.c.History(ctx, id)
	var after int64
	for err == nil {
		for _, e := range events {
			if e.Type == store.EventChildStarted {
				return e.Child
			}
			after = e.Seq
		}
		events, err = s.c.WaitHistory(ctx, id, after, 5*time.Second)
	}
	t.Fatalf("history of %s: %v", id, err)
	return ""
}

// TestChildRuns: a child run, whose id holds a slash, is served on the
// run paths, its id percent-encoded (as the client sends it) or with its
// slashes as they are: read, followed, signalled, cancelled; listed
// pages may end on it. A client may not start a run with such an id.
func TestChildRuns(t *testing.T) {
	t.Parallel()
	for _, kind := range testStores() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			testChildRuns(t, kind)
		})
	}
}

func testChildRuns(t *testing.T, kind string) {
	s := newTestServerOn(t, kind, Options{}, parentWorkflow, childWorkflow)
	ctx := t.Context()
	child := startChild(t, s, "p-1")
	if child != "p-1/1" {
		t.Fatalf("child run %q, want p-1/1 (docs/features/child-runs.md)", child)
	}

	// The client escapes the id: /v1/runs/p-1%2F1.
	run, err := s.c.GetRun(ctx, child)
	if err != nil {
		t.Fatalf("get the child run: %v", err)
	}
	if run.ID != child || run.Workflow != "child" || run.Status.Final() {
		t.Errorf("the child run: %+v", run)
	}
	events, err := s.c.History(ctx, child)
	if err != nil {
		t.Fatalf("the child run's history: %v", err)
	}
	if len(events) == 0 || events[0].Type != store.EventRunStarted || events[0].Workflow != "child" {
		t.Errorf("the child run's history: %+v", events)
	}

	// With its slashes as they are, and escaped, on every run path.
	for _, path := range []string{"/v1/runs/" + child, "/v1/runs/" + url.PathEscape(child)} {
		status, body := s.call(t, http.MethodGet, path, "")
		var got runDetailJSON
		if err := json.Unmarshal(body, &got); err != nil || status != http.StatusOK || got.ID != child {
			t.Errorf("GET %s: %d %s (%v)", path, status, body, err)
		}
		status, body = s.call(t, http.MethodHead, path, "")
		if status != http.StatusOK || len(body) != 0 {
			t.Errorf("HEAD %s: %d %s", path, status, body)
		}
		status, body = s.call(t, http.MethodGet, path+"/history?after=0", "")
		var h historyJSON
		if err := json.Unmarshal(body, &h); err != nil || status != http.StatusOK || len(h.Events) != len(events) {
			t.Errorf("GET %s/history: %d %s (%v); want its %d events", path, status, body, err, len(events))
		}
		s.wantProblem(t, http.MethodDelete, path, "", http.StatusMethodNotAllowed, "")
		s.wantProblem(t, http.MethodGet, path+"/history?stauts=1", "", http.StatusBadRequest, "stauts")
		s.wantProblem(t, http.MethodPost, path+"/signals", `{"name":""}`, http.StatusBadRequest, "name")
		// A running child has not failed on a step: no redrive.
		s.wantProblem(t, http.MethodPost, path+"/redrive", "", http.StatusConflict, "")
	}
	if status, _ := s.call(t, http.MethodPost, "/v1/runs/"+child, ""); status != http.StatusMethodNotAllowed {
		t.Errorf("POST the child run: %d, want 405", status)
	}

	// Signalled, the child ends, and so does its parent.
	if err := s.c.SignalRun(ctx, child, "go", json.RawMessage(`"done"`)); err != nil {
		t.Fatalf("signal the child run: %v", err)
	}
	if run := s.waitRun(t, child); run.Status != store.RunCompleted || string(run.Output) != `"done"` {
		t.Errorf("the child run, signalled: %+v", run)
	}
	if run := s.waitRun(t, "p-1"); run.Status != store.RunCompleted || string(run.Output) != `"done"` {
		t.Errorf("the parent run: %+v", run)
	}

	// Cancelled with its slashes as they are, then again through the client.
	other := startChild(t, s, "p-2")
	status, body := s.call(t, http.MethodPost, "/v1/runs/"+other+"/cancel", `{"reason":"testing"}`)
	var cancelled runJSON
	if err := json.Unmarshal(body, &cancelled); err != nil || status != http.StatusOK ||
		cancelled.ID != other || cancelled.Status != store.RunCancelled {
		t.Errorf("cancel %s: %d %s (%v)", other, status, body, err)
	}
	if err := s.c.CancelRun(ctx, other, "again"); !errors.Is(err, store.ErrRunFinished) {
		t.Errorf("cancel %s again: %v, want ErrRunFinished", other, err)
	}
	events, err = s.c.History(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	if last := events[len(events)-1]; last.Type != store.EventRunCancelled || last.Reason != "testing" {
		t.Errorf("the cancelled child's last event: %+v", last)
	}

	// Ids that name no run, or no endpoint.
	s.wantProblem(t, http.MethodGet, "/v1/runs/p-1%2F9", "", http.StatusNotFound, "")
	s.wantProblem(t, http.MethodGet, "/v1/runs/p-1/9/history", "", http.StatusNotFound, "")
	s.wantProblem(t, http.MethodGet, "/v1/runs/p-1%2Fx", "", http.StatusBadRequest, "id")
	s.wantProblem(t, http.MethodGet, "/v1/runs/p-1%2F1%2Fhistory", "", http.StatusBadRequest, "id")
	for _, path := range []string{"/v1/runs/p-1/x", "/v1/runs/p-1/1/frobnicate", "/v1/runs/p-1/1/", "/v1/runs/", "/v1/runs/a%20b/1"} {
		if p := s.wantProblem(t, http.MethodGet, path, "", http.StatusNotFound, ""); !strings.Contains(p.Detail, "no endpoint") {
			t.Errorf("GET %s: %s, want no endpoint", path, p.Detail)
		}
	}
	// A client chooses only ids of its own.
	p := s.wantProblem(t, http.MethodPost, "/v1/runs", `{"workflow":"child","id":"p-1/2"}`, http.StatusBadRequest, "id")
	if !strings.Contains(p.Detail, "child run's") {
		t.Errorf("start a run of a child's id: %s", p.Detail)
	}
	if _, _, err := s.c.StartRun(ctx, "child", nil, "p-1/2"); err == nil {
		t.Error("the client started a run of a child's id")
	}

	// Pages of one run end on a child run as often as on a parent: its id
	// is the cursor of the next.
	var listed []string
	cursor := ""
	for range 10 {
		runs, next, err := s.c.ListRunsPage(ctx, &store.RunListParams{Limit: 1, Before: cursor})
		if err != nil {
			t.Fatalf("list after %q: %v", cursor, err)
		}
		for _, r := range runs {
			listed = append(listed, r.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	slices.Sort(listed)
	if want := []string{"p-1", "p-1/1", "p-2", "p-2/1"}; !slices.Equal(listed, want) {
		t.Errorf("listed %v, want %v", listed, want)
	}
}

// TestContractChildRuns sends the run operations a child run's id, and
// checks each request and answer against the document: its id is a
// RunID, on the path, in a run and as a cursor.
func TestContractChildRuns(t *testing.T) {
	t.Parallel()
	doc := loadContract(t, true)
	s := newTestServer(t, Options{Token: contractToken}, parentWorkflow, childWorkflow)
	child := startChild(t, s, "p-1")
	byID := map[string]operation{}
	for _, o := range operations(doc) {
		byID[o.op.OperationID] = o
	}
	// In this order: the child runs until cancelled, then it has finished.
	for _, tt := range []struct {
		op     string
		query  string
		body   string
		status int
	}{
		{"getRun", "", "", 200},
		{"getRunHead", "", "", 200},
		{"getRunHistory", "after=1", "", 200},
		{"getRunHistoryHead", "", "", 200},
		{"listRuns", "limit=1&cursor=" + url.QueryEscape(child), "", 200},
		{"cancelRun", "", `{"reason":"testing"}`, 200},
		{"redriveRun", "", "", 409},
		{"signalRun", "", `{"name":"go"}`, 409},
	} {
		o, ok := byID[tt.op]
		if !ok {
			t.Fatalf("no operation %s", tt.op)
		}
		c := call{o: o, path: map[string]string{"id": child}, query: tt.query}
		if strings.Contains(o.path, "{id}") && !strings.Contains(c.url(""), "p-1%2F1") {
			t.Fatalf("%s: the id is not escaped", &c)
		}
		if tt.body != "" {
			c.body, c.ctype = []byte(tt.body), "application/json"
		}
		if err := openapi3filter.ValidateRequest(t.Context(), c.input(doc, c.request(t, s.url))); err != nil {
			t.Errorf("%s: not a valid request: %v", &c, err)
		}
		req, a := c.do(t, s.url)
		if err := checkAnswer(doc, &c, req, a); a.status != tt.status || err != nil {
			t.Errorf("%s: %d %s, want %d: %v", &c, a.status, a.body, tt.status, err)
		}
	}
}
