package cli

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"reprise/httpapi"
	"reprise/store"
)

// OpenTelemetry's variables turn the server's traces on, and only them:
// off unless an exporter or an endpoint is named.
func TestTracesOn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env     map[string]string
		on      bool
		wantErr string
	}{
		{env: nil},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}},
		{env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: "OTEL_TRACES_EXPORTER"},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, wantErr: "http/protobuf"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, wantErr: "grpc"},
	} {
		on, err := tracesOn(func(k string) string { return tc.env[k] })
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%v: err = %v, want one naming %s", tc.env, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || on != tc.on):
			t.Errorf("%v: on = %v, err = %v; want %v", tc.env, on, err, tc.on)
		}
	}
}

// reprise server exports its spans over OTLP/HTTP when the variables say
// so: a run started with a traceparent header is in that trace, the spans
// left are sent as the server stops, and /metrics counts the ends the
// tracer dropped.
func TestServerExportsTraces(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var spans []*tracepb.Span
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		if err != nil || r.URL.Path != "/v1/traces" {
			t.Errorf("collector got %s: %v", r.URL.Path, err)
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				spans = append(spans, ss.Spans...)
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"success": true, "output": "sent"}`))
	}))
	defer endpoint.Close()

	srv := spawnServerEnv(t, filepath.Join(t.TempDir(), "reprise.db"),
		[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.URL, "OTEL_TRACES_EXPORTER=", "OTEL_SDK_DISABLED="})
	c := newClient(t, srv.url)
	if err := c.RegisterStep(t.Context(), httpapi.Step{Name: "notify", Kind: httpapi.KindHTTP, URL: endpoint.URL}); err != nil {
		t.Fatal(err)
	}
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.url+"/v1/runs",
		strings.NewReader(`{"step":"notify","id":"n1"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Traceparent", "00-"+trace+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("start: %d", resp.StatusCode)
	}
	if run := waitRun(t, c, "n1"); run.Status != store.RunCompleted {
		t.Fatalf("run n1 %s, want completed", run.Status)
	}
	resp, err = http.Get(srv.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !strings.Contains(string(body), "\nreprise_trace_ends_dropped_total 0\n") {
		t.Errorf("GET /metrics: %v; want reprise_trace_ends_dropped_total 0 in:\n%s", err, body)
	}
	srv.stop()

	mu.Lock()
	defer mu.Unlock()
	names := map[string]string{}
	for _, s := range spans {
		names[s.Name] = hex.EncodeToString(s.TraceId)
	}
	for _, name := range []string{"run step:notify", "step notify", "POST"} {
		if got, ok := names[name]; !ok || got != trace {
			t.Errorf("span %q: trace %q (exported: %v), want trace %s", name, got, ok, trace)
		}
	}
}
