package otel_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"reprise"
	"reprise/httpapi"
	"reprise/reprisetest"
	"reprise/sqlite"
	"reprise/store"
)

// apiServer is a traced engine on SQLite behind the HTTP API.
type apiServer struct {
	url    string
	client *httpapi.Client
	spans  func() spanList
	engine *reprise.Engine
}

func newAPIServer(t *testing.T) *apiServer {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "reprise.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg, spans := tracing(t)
	cfg.Store, cfg.PollInterval, cfg.ShutdownGrace = st, 50*time.Millisecond, time.Second
	e := reprisetest.Run(t, *cfg)
	h, err := httpapi.NewHandler(e, st, httpapi.Options{MaxWait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close) // before the engine stops: cleanups run last first
	c, err := httpapi.NewClient(hs.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	return &apiServer{url: hs.URL, client: c, engine: e, spans: spans}
}

// start posts a start with a traceparent header (when tp is not empty)
// and answers its status.
func (s *apiServer) start(t *testing.T, body, tp string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.url+"/v1/runs", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if tp != "" {
		req.Header.Set("Traceparent", tp)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (s *apiServer) wait(t *testing.T, id string) *store.Run {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		run, err := s.client.WaitRun(t.Context(), id, time.Second) // answers when it changes
		if err != nil {
			t.Fatal(err)
		}
		if run.Status.Final() {
			return run
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is still %s", id, run.Status)
		}
	}
}

// waitSpan waits for the span named name: spans are emitted after what
// they cover is recorded, which is when a client sees it.
func (s *apiServer) waitSpan(t *testing.T, name string, n int) spanList {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		spans := s.spans()
		if len(spans.all(name)) >= n || time.Now().After(deadline) {
			return spans
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An HTTP step's endpoint gets its attempt's traceparent, and the
// attempt's span is an HTTP client span, whose url.full has none of the
// URL's secrets; a start's traceparent header puts the run in the
// caller's trace.
func TestHTTPStepSendsTraceParent(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Traceparent"))
		n := len(got)
		mu.Unlock()
		if n == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte(`{"success": true, "output": "sent"}`))
	}))
	defer endpoint.Close()
	s := newAPIServer(t)
	withUser := strings.Replace(endpoint.URL, "http://", "http://user:s3cret@", 1)
	if err := s.client.RegisterStep(t.Context(), httpapi.Step{Name: "notify", Kind: httpapi.KindHTTP, URL: withUser + "/hook?secret=x",
		Policy: "[retry: 3, backoff: 10ms]"}); err != nil {
		t.Fatal(err)
	}
	if status := s.start(t, `{"step":"notify","input":1,"id":"n1"}`, callerTP); status != http.StatusCreated {
		t.Fatalf("start: %d", status)
	}
	s.wait(t, "n1")
	if run, err := s.engine.GetRun(t.Context(), "n1"); err != nil || run.Status != store.RunCompleted || run.TraceParent != callerTP {
		t.Fatalf("run n1: %v, %+v; want completed, with the header's TraceParent %q", err, run, callerTP)
	}
	spans := s.waitSpan(t, "run step:notify", 1)
	attempts := spans.all("POST")
	if len(attempts) != 2 || len(got) != 2 {
		t.Fatalf("%d POST spans and %d calls, want 2 of each: %v", len(attempts), len(got), spans.names())
	}
	step := spans.one(t, "step notify")
	for _, a := range attempts {
		n := attr(a, "reprise.attempt").AsInt64()
		sent := got[n-1]
		if want := "00-" + callerTrace + "-" + a.SpanContext.SpanID().String() + "-01"; sent != want {
			t.Errorf("attempt %d sent traceparent %q, want its span's %q", n, sent, want)
		}
		if a.SpanKind != trace.SpanKindClient || a.Parent.SpanID() != step.SpanContext.SpanID() {
			t.Errorf("attempt %d: kind %v, parent %v; want a client span, child of the step's %v", n, a.SpanKind, a.Parent.SpanID(), step.SpanContext.SpanID())
		}
		want := map[string]any{"http.request.method": "POST", "server.address": "127.0.0.1",
			"url.full": strings.Replace(endpoint.URL, "http://", "http://xxxxx@", 1) + "/hook", "http.response.status_code": int64(503)}
		if n == 2 {
			want["http.response.status_code"] = int64(200)
			want["http.request.resend_count"] = int64(1)
		}
		wantAttrs(t, a, want)
	}
	if run := spans.one(t, "run step:notify"); run.Parent.SpanID().String() != callerSpan {
		t.Fatalf("run span's parent = %v, want the header's span %s", run.Parent.SpanID(), callerSpan)
	}
}

// A pull worker's claim carries its attempt's traceparent; the attempt's
// span, emitted when the worker completes it, has that span id. A start's
// body field takes precedence over the header; a bad one starts nothing.
func TestPullWorkerClaimCarriesTraceParent(t *testing.T) {
	t.Parallel()
	s := newAPIServer(t)
	ctx := t.Context()
	if err := s.client.RegisterStep(ctx, httpapi.Step{Name: "work", Kind: httpapi.KindPull}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ body, header string }{
		{`{"step":"work","id":"bad1","traceparent":"00-xyz"}`, ""},
		{`{"step":"work","id":"bad2"}`, "00-" + callerTrace + "-0000000000000000-01"},
	} {
		if status := s.start(t, tc.body, tc.header); status != http.StatusBadRequest {
			t.Errorf("start %s with header %q: %d, want 400", tc.body, tc.header, status)
		}
	}
	for _, id := range []string{"bad1", "bad2"} {
		if _, err := s.client.GetRun(ctx, id); err == nil {
			t.Errorf("run %s exists after a refused start", id)
		}
	}
	const bodyTrace = "0af7651916cd43dd8448eb211c80319c"
	body := `{"step":"work","id":"w1","traceparent":"00-` + bodyTrace + `-b7ad6b7169203331-01"}`
	if status := s.start(t, body, callerTP); status != http.StatusCreated {
		t.Fatalf("start: %d", status)
	}
	var tasks []httpapi.Task
	deadline := time.Now().Add(10 * time.Second)
	for len(tasks) == 0 && time.Now().Before(deadline) {
		var err error
		if tasks, err = s.client.Claim(ctx, httpapi.ClaimParams{Worker: "w", Steps: []string{"work"}, Wait: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	if len(tasks) != 1 {
		t.Fatalf("claimed %d tasks, want 1", len(tasks))
	}
	tp := tasks[0].TraceParent
	if !strings.HasPrefix(tp, "00-"+bodyTrace+"-") {
		t.Fatalf("claimed task's traceparent %q is not in the body's trace %s", tp, bodyTrace)
	}
	if err := s.client.Complete(ctx, tasks[0].ID, tasks[0].Token, json.RawMessage(`"done"`)); err != nil {
		t.Fatal(err)
	}
	s.wait(t, "w1")
	spans := s.waitSpan(t, "run step:work", 1)
	a := spans.one(t, "attempt work")
	if got := "00-" + a.SpanContext.TraceID().String() + "-" + a.SpanContext.SpanID().String() + "-01"; got != tp {
		t.Fatalf("attempt span is %s, want the claim's %s", got, tp)
	}
	if a.Parent.SpanID() != spans.one(t, "step work").SpanContext.SpanID() {
		t.Fatal("the pull attempt's span is not a child of its step's")
	}
	wantAttrs(t, a, map[string]any{"reprise.attempt.worker": "w", "reprise.attempt.outcome": "ok"})
}
