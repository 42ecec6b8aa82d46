package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"reprise"
	"reprise/httpstep"
	"reprise/sqlite"
	"reprise/store"
)

// openStore opens a SQLite store in the test's directory, closed when the
// test ends (after the servers on it, which register their cleanups
// later).
func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "reprise.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// newServerOn is newTestServer on a store of the test's (see serveOn).
func newServerOn(t *testing.T, st store.Store, run bool, opts Options, defs ...reprise.Definition) *testServer {
	t.Helper()
	return serveOn(t, st, run, 2*time.Second, opts, defs...)
}

// register registers a step, which must answer status.
func (s *testServer) register(t *testing.T, body string, status int) *Step {
	t.Helper()
	got, b := s.call(t, "POST", "/v1/steps", body)
	var step Step
	if got != status || json.Unmarshal(b, &step) != nil {
		t.Fatalf("POST /v1/steps %s: %d %s, want %d", body, got, b, status)
	}
	return &step
}

// A recorder is an HTTP step endpoint that records who called each path.
type recorder struct {
	*httptest.Server
	mu    sync.Mutex
	calls map[string][]string // path → the run of each call
}

func newRecorder(t *testing.T, handle func(path string, n int, w http.ResponseWriter)) *recorder {
	rec := &recorder{calls: map[string][]string{}}
	rec.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req httpstep.Request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Errorf("decode the step's request: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rec.mu.Lock()
		rec.calls[r.URL.Path] = append(rec.calls[r.URL.Path], req.RunID)
		n := len(rec.calls[r.URL.Path])
		rec.mu.Unlock()
		handle(r.URL.Path, n, w)
	}))
	t.Cleanup(rec.Close)
	return rec
}

func (rec *recorder) runs(path string) []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]string(nil), rec.calls[path]...)
}

// succeed answers an HTTP step's call with success.
func succeed(t testing.TB, w http.ResponseWriter) {
	if _, err := w.Write([]byte(`{"success": true, "output": "ok"}`)); err != nil {
		t.Errorf("answer the step: %v", err)
	}
}

// TestStepsSurviveARestart: steps registered through one server are in
// the database; a server started later on it runs the runs that need them
// without their being registered again.
func TestStepsSurviveARestart(t *testing.T) {
	t.Parallel()
	endpoint := newRecorder(t, func(_ string, _ int, w http.ResponseWriter) { succeed(t, w) })
	st := openStore(t)
	before := newServerOn(t, st, false, Options{})
	before.register(t, `{"name":"charge","kind":"http","url":"`+endpoint.URL+`/charge","policy":"[retry: 2]"}`, 201)
	before.register(t, `{"name":"resize","kind":"pull"}`, 201)
	if _, _, err := before.c.StartStep(t.Context(), "charge", json.RawMessage(`1`), "r1"); err != nil {
		t.Fatal(err)
	}

	after := newServerOn(t, st, true, Options{})
	if run := after.waitRun(t, "r1"); run.Status != store.RunCompleted {
		t.Fatalf("run = %+v", run)
	}
	if got := endpoint.runs("/charge"); len(got) != 1 || got[0] != "r1" {
		t.Errorf("calls = %v, want one of r1", got)
	}
	steps, err := after.c.ListSteps(t.Context())
	if err != nil || len(steps) != 2 || steps[0].Name != "charge" || steps[0].Version != 1 || steps[0].Policy != "[retry: 2]" ||
		steps[1].Name != "resize" || steps[1].Kind != KindPull {
		t.Fatalf("steps after the restart: %v %+v", err, steps)
	}
	// The pull step is claimable, and startable, without a registration.
	if _, _, err := after.c.StartStep(t.Context(), "resize", nil, "p1"); err != nil {
		t.Fatal(err)
	}
	tasks, err := after.c.Claim(t.Context(), ClaimParams{Worker: "w", Steps: []string{"resize"}, Wait: 5 * time.Second})
	if err != nil || len(tasks) != 1 {
		t.Fatalf("claim: %v %+v", err, tasks)
	}
}

// TestStepReRegistrationAppliesToStepsScheduledAfterIt: two servers on one
// database. A step scheduled under version 1 keeps version 1's URL for
// its retry, although version 2 was registered (on the other server)
// while it waited; a step scheduled afterwards, on the server that
// registered neither, goes to version 2's URL.
func TestStepReRegistrationAppliesToStepsScheduledAfterIt(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	endpoint := newRecorder(t, func(path string, n int, w http.ResponseWriter) {
		if path == "/one" && n == 1 {
			close(entered)
			<-release
			http.Error(w, "not yet", http.StatusInternalServerError)
			return
		}
		succeed(t, w)
	})
	st := openStore(t)
	a := newServerOn(t, st, true, Options{})
	b := newServerOn(t, st, true, Options{})

	v1 := a.register(t, `{"name":"charge","kind":"http","url":"`+endpoint.URL+`/one","policy":"[retry: 3, backoff: 10ms]"}`, 201)
	if v1.Version != 1 {
		t.Fatalf("first registration: %+v", v1)
	}
	if _, _, err := a.c.StartStep(t.Context(), "charge", nil, "r1"); err != nil {
		t.Fatal(err)
	}
	<-entered
	v2 := b.register(t, `{"name":"charge","kind":"http","url":"`+endpoint.URL+`/two","policy":"[retry: 3, backoff: 10ms]"}`, 201)
	if v2.Version != 2 {
		t.Fatalf("second registration: %+v", v2)
	}
	// a registered version 1 itself and was not told of version 2.
	if _, _, err := a.c.StartStep(t.Context(), "charge", nil, "r2"); err != nil {
		t.Fatal(err)
	}
	close(release)
	for _, id := range []string{"r1", "r2"} {
		if run := a.waitRun(t, id); run.Status != store.RunCompleted {
			t.Fatalf("run %s = %+v", id, run)
		}
	}
	if one, two := endpoint.runs("/one"), endpoint.runs("/two"); len(one) != 2 || one[0] != "r1" || one[1] != "r1" ||
		len(two) != 1 || two[0] != "r2" {
		t.Fatalf("calls: /one %v, /two %v; want r1 twice at /one, r2 once at /two", one, two)
	}
	for id, want := range map[string]int{"r1": 1, "r2": 2} {
		events, err := a.c.History(t.Context(), id)
		if err != nil || len(events) < 2 || events[1].Type != store.EventStepScheduled || events[1].Version != want {
			t.Fatalf("history of %s: %v %+v; want StepScheduled of version %d", id, err, events, want)
		}
	}
	for _, s := range []*testServer{a, b} {
		steps, err := s.c.ListSteps(t.Context())
		if err != nil || len(steps) != 1 || steps[0].Version != 2 || !strings.HasSuffix(steps[0].URL, "/two") {
			t.Fatalf("steps: %v %+v", err, steps)
		}
		if got, err := s.c.GetStep(t.Context(), "charge", 1); err != nil || got.Version != 1 || !strings.HasSuffix(got.URL, "/one") {
			t.Fatalf("version 1: %v %+v", err, got)
		}
	}
}

// TestStepAStepRegisteredElsewhereIsKnown: a server learns of a step
// registered on another server when a request names it.
func TestStepAStepRegisteredElsewhereIsKnown(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	a := newServerOn(t, st, true, Options{})
	b := newServerOn(t, st, true, Options{})
	a.register(t, `{"name":"resize","kind":"pull"}`, 201)
	if _, _, err := b.c.StartStep(t.Context(), "resize", nil, "p1"); err != nil {
		t.Fatalf("start on the other server: %v", err)
	}
	tasks, err := b.c.Claim(t.Context(), ClaimParams{Worker: "w", Steps: []string{"resize"}, Wait: 5 * time.Second})
	if err != nil || len(tasks) != 1 {
		t.Fatalf("claim on the other server: %v %+v", err, tasks)
	}
	if got, err := b.c.GetStep(t.Context(), "resize", 0); err != nil || got.Kind != KindPull || got.Version != 1 {
		t.Fatalf("GET /v1/steps/resize: %v %+v", err, got)
	}
}

var double = reprise.NewStep("double", func(ctx context.Context, n int) (int, error) { return 2 * n, nil })

func TestStepConflictsAndDeletes(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Options{Steps: []string{"double"}}, double)
	ctx := t.Context()

	// A Go step of the server can be neither registered nor deleted.
	p := s.wantProblem(t, "POST", "/v1/steps", `{"name":"double","kind":"http","url":"http://127.0.0.1:1/"}`, 409, "name")
	if p.Type != ProblemStepConflict || !strings.Contains(p.Detail, "Go step") {
		t.Errorf("registering a Go step: %+v", p)
	}
	s.wantProblem(t, "DELETE", "/v1/steps/double", "", 409, "name")
	if got, err := s.c.GetStep(ctx, "double", 0); err != nil || got.Kind != KindGo {
		t.Errorf("GET a Go step: %v %+v", err, got)
	}

	// A step's kind does not change.
	s.register(t, `{"name":"work","kind":"pull"}`, 201)
	p = s.wantProblem(t, "POST", "/v1/steps", `{"name":"work","kind":"http","url":"http://127.0.0.1:1/"}`, 409, "kind")
	if p.Type != ProblemStepConflict || !strings.Contains(p.Detail, "DELETE /v1/steps/work") {
		t.Errorf("changing a step's kind: %+v", p)
	}
	s.wantProblem(t, "POST", "/v1/steps", `{"name":"x","kind":"go"}`, 400, "kind")

	// Bad deletes.
	s.wantProblem(t, "DELETE", "/v1/steps/nope", "", 404, "")
	s.wantProblem(t, "DELETE", "/v1/steps/a%20b", "", 400, "name")
	s.wantProblem(t, "DELETE", "/v1/steps/work?force=maybe", "", 400, "force")
	s.wantProblem(t, "DELETE", "/v1/steps/work?forced=true", "", 400, "forced")
	s.wantProblem(t, "GET", "/v1/steps/work?version=0", "", 400, "version")
	s.wantProblem(t, "GET", "/v1/steps/work?version=2", "", 404, "")

	// Refused while a run needs the step, then deleted once none does.
	if _, _, err := s.c.StartStep(ctx, "work", nil, "w1"); err != nil {
		t.Fatal(err)
	}
	p = s.wantProblem(t, "DELETE", "/v1/steps/work", "", 409, "")
	if p.Type != ProblemStepInUse || !strings.Contains(p.Detail, "w1") || !strings.Contains(p.Detail, "force=true") {
		t.Errorf("deleting a step in use: %+v", p)
	}
	if err := s.c.DeleteStep(ctx, "work", false); !errors.Is(err, store.ErrStepInUse) {
		t.Errorf("client DeleteStep of a step in use: %v", err)
	}
	tasks, err := s.c.Claim(ctx, ClaimParams{Worker: "w", Steps: []string{"work"}, Wait: 5 * time.Second})
	if err != nil || len(tasks) != 1 {
		t.Fatalf("claim: %v %+v", err, tasks)
	}
	if err := s.c.Complete(ctx, tasks[0].ID, tasks[0].Token, json.RawMessage(`1`)); err != nil {
		t.Fatal(err)
	}
	s.waitRun(t, "w1")
	if status, body := s.call(t, "DELETE", "/v1/steps/work", ""); status != 204 {
		t.Fatalf("DELETE a step no run needs: %d %s", status, body)
	}
	s.wantProblem(t, "GET", "/v1/steps/work", "", 404, "")
	if got, err := s.c.GetStep(ctx, "work", 1); err != nil || got.Version != 1 {
		t.Errorf("version 1 of the deleted step: %v %+v", err, got)
	}
	s.wantProblem(t, "POST", "/v1/tasks/claim", `{"worker":"w","steps":["work"]}`, 400, "steps.0")
	s.wantProblem(t, "POST", "/v1/runs", `{"step":"work"}`, 400, "step")
	if steps, err := s.c.ListSteps(ctx); err != nil || len(steps) != 1 || steps[0].Name != "double" {
		t.Errorf("steps after the delete: %v %+v", err, steps)
	}

	// Registered again, as another kind even, under the next version.
	again := s.register(t, `{"name":"work","kind":"http","url":"http://127.0.0.1:1/"}`, 201)
	if again.Version != 2 || again.Kind != KindHTTP {
		t.Errorf("registered again: %+v", again)
	}

	// With force, a step in use goes.
	s.register(t, `{"name":"other","kind":"pull"}`, 201)
	if _, _, err := s.c.StartStep(ctx, "other", nil, "o1"); err != nil {
		t.Fatal(err)
	}
	if err := s.c.DeleteStep(ctx, "other", true); err != nil {
		t.Errorf("DeleteStep with force: %v", err)
	}
}

// TestStepURLSecretsNotShown: the credentials in a step's URL, a password
// or a query-string token, are used and never answered.
func TestStepURLSecretsNotShown(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Options{})
	_, body := s.call(t, "POST", "/v1/steps", `{"name":"charge","kind":"http","url":"http://user:s3cret@127.0.0.1:1/x?api_key=t0ps3cret&n=1"}`)
	if strings.Contains(string(body), "s3cret") || !strings.Contains(string(body), `"http://xxxxx@127.0.0.1:1/x?api_key=xxxxx\u0026n=1"`) {
		t.Errorf("registration answered %s", body)
	}
	for _, path := range []string{"/v1/steps", "/v1/steps/charge", "/v1/steps/charge?version=1"} {
		if _, body := s.call(t, "GET", path, ""); strings.Contains(string(body), "s3cret") {
			t.Errorf("GET %s answered %s", path, body)
		}
	}
}

// TestStepDeletedAndRegisteredAgainElsewhere: a server that knew a step
// deleted on another server, and registered there again as another kind,
// schedules it under the new version once it has read the delete.
func TestStepDeletedAndRegisteredAgainElsewhere(t *testing.T) {
	t.Parallel()
	endpoint := newRecorder(t, func(_ string, _ int, w http.ResponseWriter) { succeed(t, w) })
	st := openStore(t)
	a := newServerOn(t, st, true, Options{})
	b := newServerOn(t, st, true, Options{})
	ctx := t.Context()
	a.register(t, `{"name":"work","kind":"pull"}`, 201)
	if _, err := b.c.GetStep(ctx, "work", 0); err != nil { // b knows version 1
		t.Fatal(err)
	}
	if err := a.c.DeleteStep(ctx, "work", false); err != nil {
		t.Fatal(err)
	}
	// b has not read the delete: it starts a run, and reads the delete as
	// the run schedules the step, under no version: the run waits for the
	// step to be registered again.
	if _, _, err := b.c.StartStep(ctx, "work", nil, "stale"); err != nil {
		t.Fatal(err)
	}
	b.waitEvent(t, "stale", store.EventStepScheduled)
	events, err := b.c.History(ctx, "stale")
	if err != nil || len(events) < 2 || events[1].Type != store.EventStepScheduled || events[1].Version != 0 {
		t.Fatalf("history of the run started on the stale server: %v %+v", err, events)
	}
	b.wantProblem(t, "POST", "/v1/runs", `{"step":"work"}`, 400, "step")

	a.register(t, `{"name":"work","kind":"http","url":"`+endpoint.URL+`/work"}`, 201)
	if _, _, err := b.c.StartStep(ctx, "work", nil, "fresh"); err != nil {
		t.Fatal(err)
	}
	if run := b.waitRun(t, "fresh"); run.Status != store.RunCompleted {
		t.Fatalf("run: %+v", run)
	}
	events, err = b.c.History(ctx, "fresh")
	if err != nil || events[1].Type != store.EventStepScheduled || events[1].Version != 2 {
		t.Fatalf("history of the run started after the new registration: %v %+v", err, events)
	}
}
