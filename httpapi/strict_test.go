package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"reprise"
	"reprise/postgres"
	"reprise/sqlite"
	"reprise/store"
)

// strictStores opens the stores the strict-input tests run on: SQLite
// always, PostgreSQL when REPRISE_TEST_POSTGRES is set (its text columns
// refuse what SQLite stores: invalid UTF-8, NUL).
func strictStores(t *testing.T) map[string]func(t *testing.T) store.Store {
	stores := map[string]func(t *testing.T) store.Store{
		"sqlite": func(t *testing.T) store.Store {
			s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "reprise.db"), &sqlite.Options{Synchronous: "OFF"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
	dsn := os.Getenv("REPRISE_TEST_POSTGRES")
	if dsn == "" {
		return stores
	}
	stores["postgres"] = func(t *testing.T) store.Store {
		schema := fmt.Sprintf("reprise_httpapi_%d", time.Now().UnixNano()%1e12)
		s, err := postgres.Open(t.Context(), dsn, &postgres.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			s.Close()
			dropSchema(t, dsn, schema)
		})
		return s
	}
	return stores
}

// serveStore serves the API of a running engine on store, with leases
// long enough that none lapses while a table of requests runs.
func serveStore(t *testing.T, st store.Store, opts Options, defs ...reprise.Definition) *testServer {
	t.Helper()
	return serveOn(t, st, true, time.Minute, opts, defs...)
}

// snapshot is what the API's clients can see of the server's state: every
// run with its history, and the registered steps.
func (s *testServer) snapshot(t *testing.T) string {
	t.Helper()
	ctx := t.Context()
	runs, err := s.st.RunList(ctx, &store.RunListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, run := range runs {
		events, err := s.st.HistoryList(ctx, &store.HistoryListParams{RunID: run.ID})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %s %s %s\n", run.ID, run.Workflow, run.Status, run.Input)
		for _, e := range events {
			j, _ := json.Marshal(e)
			fmt.Fprintf(&b, "  %s\n", j)
		}
	}
	steps, err := s.c.ListSteps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "steps %+v\n", steps)
	return b.String()
}

// TestStrictInput sends bad input to every endpoint, each case a request
// that would change something if its fault were overlooked: each gets a
// 400 naming the field, and changes nothing.
func TestStrictInput(t *testing.T) {
	t.Parallel()
	for name, open := range strictStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := serveStore(t, open(t), Options{}, echo, sleeper)
			ctx := t.Context()
			if _, _, err := s.c.StartRun(ctx, "sleeper", nil, "r1"); err != nil {
				t.Fatal(err)
			}
			if err := s.c.RegisterStep(ctx, Step{Name: "work", Kind: KindPull}); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"p1", "p2"} {
				if _, _, err := s.c.StartStep(ctx, "work", nil, id); err != nil {
					t.Fatal(err)
				}
			}
			// One task claimed (its writes would change the history),
			// one ready (a claim would take it).
			tasks, err := s.c.Claim(ctx, ClaimParams{Worker: "w", Steps: []string{"work"}, Wait: 10 * time.Second})
			if err != nil || len(tasks) != 1 {
				t.Fatalf("claim: %v %+v", err, tasks)
			}
			task := tasks[0]
			tp := func(verb string) string { return fmt.Sprintf("/v1/tasks/%d/%s", task.ID, verb) }
			tok := func(body string) string { return strings.ReplaceAll(body, "TOKEN", fmt.Sprint(task.Token)) }
			// The engine has done all it will do until a worker acts
			// (either run's step may be the one claimed).
			s.waitEvent(t, "p1", store.EventStepScheduled)
			s.waitEvent(t, "p2", store.EventStepScheduled)
			s.waitEvent(t, "r1", store.EventTimerScheduled)

			for _, c := range []struct {
				method, path, body string
				field              string
			}{
				// Field names are matched exactly; a name is given once.
				{"POST", "/v1/runs", `{"workflow":"echo","id":"a","ID":"b"}`, "ID"},
				{"POST", "/v1/runs", `{"Workflow":"echo"}`, "Workflow"},
				{"POST", "/v1/runs", `{"workflow":"echo","id":"a","id":"b"}`, "id"},
				{"POST", "/v1/runs", `{"workflow":"echo","input":{"a":1,"a":2}}`, "input.a"},
				{"POST", "/v1/runs", `{"workflow":"echo","bogus":1}`, "bogus"},
				// Strings are valid UTF-8 without NUL, at any depth.
				{"POST", "/v1/runs", "{\"workflow\":\"echo\",\"input\":\"\xff\"}", "input"},
				{"POST", "/v1/runs", `{"workflow":"echo","input":"\ud800"}`, "input"},
				{"POST", "/v1/runs", `{"workflow":"echo","input":{"k":["\u0000"]}}`, "input.k.0"},
				{"POST", "/v1/runs", `{"workflow":"echo","input":{"\u0000":1}}`, "input"},
				{"POST", "/v1/runs", `{"step":"work\u0000"}`, "step"},
				{"POST", "/v1/runs?wait=1s", `{"workflow":"echo"}`, "wait"},
				// Query parameters: only those the endpoint takes, once each.
				{"GET", "/v1/runs?stauts=failed", "", "stauts"},
				{"GET", "/v1/runs?status=failed&status=running", "", "status"},
				{"GET", "/v1/runs?workflow=%00", "", "workflow"},
				{"GET", "/v1/runs?workflow=%ff", "", "workflow"},
				{"GET", "/v1/runs?limit=%zz", "", "query"},
				{"GET", "/v1/runs/r1?wiat=1s", "", "wiat"},
				{"GET", "/v1/runs/r1/history?after=1&after=2", "", "after"},
				{"GET", "/v1/steps?name=work", "", "name"},
				{"GET", "/v1/steps/work?versoin=1", "", "versoin"},
				{"DELETE", "/v1/steps/work?forse=true", "", "forse"},
				{"DELETE", "/v1/steps/work?force=true&force=true", "", "force"},
				{"GET", "/metrics?x=1", "", "x"},
				{"GET", "/healthz?verbose=1", "", "verbose"},
				{"POST", "/v1/runs/r1/cancel", `{"reason":"x","Reason":"y"}`, "Reason"},
				{"POST", "/v1/runs/r1/cancel", `{"reason":"x\u0000"}`, "reason"},
				{"POST", "/v1/runs/r1/cancel?force=1", `{"reason":"x"}`, "force"},
				{"POST", "/v1/runs/r1/redrive", `{"By":"me"}`, "By"},
				{"POST", "/v1/runs/r1/signals", `{"name":"go","name":"stop"}`, "name"},
				{"POST", "/v1/runs/r1/signals", `{"name":"go","payload":{"x":"\u0000"}}`, "payload.x"},
				{"POST", "/v1/steps", `{"name":"w2","kind":"pull","Kind":"http"}`, "Kind"},
				{"POST", "/v1/steps", `{"name":"w2","kind":"pull","policy":{"max_retries":1,"max_retries":2}}`, "policy.max_retries"},
				{"POST", "/v1/steps", "{\"name\":\"w2\",\"kind\":\"pull\",\"policy\":\"[retry: 3]\xc3\"}", "policy"},
				// Integers where integers are meant.
				{"POST", "/v1/tasks/claim", `{"worker":"w\u0000","steps":["work"]}`, "worker"},
				{"POST", "/v1/tasks/claim", `{"worker":"w","steps":["work"],"max":0}`, "max"},
				{"POST", "/v1/tasks/claim", `{"worker":"w","steps":["work"],"max":1.5}`, "max"},
				{"POST", "/v1/tasks/claim", `{"worker":"w","steps":["work"],"max":1e400}`, "max"},
				{"POST", "/v1/tasks/claim", `{"worker":"w","steps":["work"],"max":"2"}`, "max"},
				{"POST", "/v1/tasks/claim", `{"worker":"w","steps":["work"],"Max":2}`, "Max"},
				{"POST", tp("complete"), tok(`{"token":TOKEN,"Token":2}`), "Token"},
				{"POST", tp("complete"), tok(`{"token":TOKEN.0}`), "token"},
				{"POST", tp("complete"), tok(`{"token":TOKEN,"output":{"a":1,"a":1}}`), "output.a"},
				{"POST", tp("complete"), tok(`{"token":TOKEN,"output":"\u0000"}`), "output"},
				{"POST", tp("fail"), tok(`{"token":TOKEN,"error":{"type":"X","Type":"Y"}}`), "error.Type"},
				{"POST", tp("fail"), tok(`{"token":TOKEN,"error":{"type":"X","retry_after_ms":1.5}}`), "error.retry_after_ms"},
				{"POST", tp("fail"), tok(`{"token":TOKEN,"error":{"type":"X\u0000"}}`), "error.type"},
				{"POST", tp("heartbeat") + "?x=1", tok(`{"token":TOKEN}`), "x"},
				{"POST", tp("heartbeat"), `{"token":99999999999999999999}`, "token"},
			} {
				before := s.snapshot(t)
				p := s.wantProblem(t, c.method, c.path, c.body, 400, c.field)
				if strings.Contains(p.Detail, "want a number") && c.field != "" {
					t.Errorf("%s %s %s: %q says number for an integer", c.method, c.path, c.body, p.Detail)
				}
				if after := s.snapshot(t); after != before {
					t.Errorf("%s %s %s changed the state:\nbefore:\n%s\nafter:\n%s", c.method, c.path, c.body, before, after)
				}
			}
			// And the good ones still work.
			if status, body := s.call(t, "GET", "/v1/runs?status=running&limit=5", ""); status != 200 {
				t.Errorf("list: %d %s", status, body)
			}
			if status, body := s.call(t, "POST", tp("complete"), tok(`{"token":TOKEN,"output":{"ok":true}}`)); status != 200 {
				t.Errorf("complete: %d %s", status, body)
			}
		})
	}
}

// TestStrictInputMessages pins what the problems say, for the cases whose
// wording helps the most.
func TestStrictInputMessages(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Options{}, echo)
	for _, c := range []struct{ method, path, body, field, detail string }{
		{"POST", "/v1/runs", `{"workflow":"echo","ID":"b"}`, "ID", `unknown field "ID" (names are case-sensitive: "id")`},
		{"POST", "/v1/runs", `{"workflow":"echo","id":"a","id":"b"}`, "id", "id is given more than once"},
		{"POST", "/v1/tasks/claim", `{"worker":"w","steps":["x"],"max":1.5}`, "max", "max 1.5 is not an integer"},
		{"POST", "/v1/tasks/claim", `{"worker":"w","steps":["x"],"max":"2"}`, "max", "max is a JSON string; want an integer"},
		{"POST", "/v1/tasks/1/heartbeat", `{"token":1e400}`, "token", "token 1e400 is not an integer"},
		{"POST", "/v1/tasks/1/heartbeat", `{"token":99999999999999999999}`, "token", "token 99999999999999999999 is out of range"},
		{"POST", "/v1/runs", `{"workflow":"echo","input":"a\u0000"}`, "input", `input holds a NUL character (\u0000), which no string may`},
		{"GET", "/v1/runs?stauts=failed", "", "stauts", `unknown query parameter "stauts"; this endpoint takes status, workflow, step, error_type, since, until, limit, cursor`},
		{"GET", "/v1/steps?x=1", "", "x", `unknown query parameter "x"; this endpoint takes none`},
		// A URL that does not parse is quoted without its password.
		{"POST", "/v1/steps", `{"name":"w","kind":"http","url":"http://u:hunter2@[::1"}`, "url", `parse "http://xxxxx@[::1": missing ']' in host`},
	} {
		p := s.wantProblem(t, c.method, c.path, c.body, 400, c.field)
		if p.Detail != c.detail {
			t.Errorf("%s %s %s: detail %q, want %q", c.method, c.path, c.body, p.Detail, c.detail)
		}
	}
}

// TestInternalErrorIsOpaque: a 500 tells the client an error id and
// nothing of the error; the log line has both, at error level.
func TestInternalErrorIsOpaque(t *testing.T) {
	t.Parallel()
	var log syncBuffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	st := strictStores(t)["sqlite"](t)
	s := serveStore(t, failingStore{st}, Options{Logger: logger}, echo)
	status, body := s.call(t, "GET", "/v1/runs", "")
	var p Problem
	if err := json.Unmarshal(body, &p); err != nil || status != 500 || p.ErrorID == "" {
		t.Fatalf("GET /v1/runs: %d %s", status, body)
	}
	if strings.Contains(string(body), "hunter2") || strings.Contains(string(body), "db.internal") {
		t.Errorf("the answer tells of the error: %s", body)
	}
	line := log.String()
	if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "error_id="+p.ErrorID) ||
		!strings.Contains(line, "db.internal") {
		t.Errorf("log %q lacks the level, the id %s or the error", line, p.ErrorID)
	}
}

// failingStore fails every run listing with an error that names the
// database's user and host, as a driver's errors do.
type failingStore struct{ store.Store }

func (failingStore) RunList(context.Context, *store.RunListParams) ([]*store.Run, error) {
	return nil, fmt.Errorf("list runs: failed to connect to `user=app password=hunter2 host=db.internal`")
}

func TestNewHandlerTokens(t *testing.T) {
	t.Parallel()
	for _, opts := range []Options{
		{Tokens: []string{""}},
		{Tokens: []string{"has space"}},
		{Token: "tab\there"},
		{Tokens: []string{"ok-token", "naïve"}},
	} {
		if _, err := NewHandler(nil, nil, opts); err == nil {
			t.Errorf("%+v accepted", opts)
		}
	}
}

// TestAuthRotation: every configured token is accepted, none other.
func TestAuthRotation(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Options{Token: "old-token-0123456789", Tokens: []string{"new-token-0123456789", "newer"}}, echo)
	for header, want := range map[string]int{
		"Bearer old-token-0123456789":  200,
		"Bearer new-token-0123456789":  200,
		"Bearer newer":                 200,
		"Bearer new-token-012345678":   401,
		"Bearer new-token-01234567890": 401,
		"Bearer ":                      401,
		"new-token-0123456789":         401,
	} {
		req := httptest.NewRequest(http.MethodGet, "/v1/steps", nil)
		req.Header.Set("Authorization", header)
		w := httptest.NewRecorder()
		s.handle.ServeHTTP(w, req)
		if w.Code != want {
			t.Errorf("Authorization %q: %d, want %d", header, w.Code, want)
		}
	}
}

// syncBuffer is a log destination safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// waitEvent waits, through the history's long-poll, for run id to have an
// event of type typ.
func (s *testServer) waitEvent(t *testing.T, id string, typ store.EventType) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		events, err := s.c.History(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			if e.Type == typ {
				return
			}
		}
		status, body := s.call(t, "GET", fmt.Sprintf("/v1/runs/%s/history?after=%d&wait=5s", id, events[len(events)-1].Seq), "")
		if status != 200 {
			t.Fatalf("history of %s: %d %s", id, status, body)
		}
	}
	t.Fatalf("run %s has no %s event", id, typ)
}
