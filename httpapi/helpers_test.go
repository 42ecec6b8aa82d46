package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"reprise"
	"reprise/postgres"
	"reprise/sqlite"
	"reprise/store"
)

// testServer is the API of a running real-clock engine on a temporary
// SQLite database.
type testServer struct {
	e      *reprise.Engine
	st     store.Store
	c      *Client
	url    string
	token  string
	handle http.Handler
}

func newTestServer(t testing.TB, opts Options, defs ...reprise.Definition) *testServer {
	t.Helper()
	return newTestServerOn(t, "sqlite", opts, defs...)
}

// testStores names the stores a test runs on: SQLite, and PostgreSQL when
// REPRISE_TEST_POSTGRES is set.
func testStores() []string {
	if os.Getenv("REPRISE_TEST_POSTGRES") != "" {
		return []string{"sqlite", "postgres"}
	}
	return []string{"sqlite"}
}

var schemaSeq atomic.Int64

// newTestServerOn is newTestServer on store kind "sqlite" or "postgres"
// (a schema of the test's own on REPRISE_TEST_POSTGRES's database).
func newTestServerOn(t testing.TB, kind string, opts Options, defs ...reprise.Definition) *testServer {
	t.Helper()
	var st store.Store
	var err error
	switch kind {
	case "sqlite":
		st, err = sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "reprise.db"), nil)
	case "postgres":
		dsn := os.Getenv("REPRISE_TEST_POSTGRES")
		schema := fmt.Sprintf("reprise_httpapi_%d_%d", time.Now().UnixNano()%1e9, schemaSeq.Add(1))
		t.Cleanup(func() { dropSchema(t, dsn, schema) })
		st, err = postgres.Open(t.Context(), dsn, &postgres.Options{Schema: schema})
	default:
		err = fmt.Errorf("no store %q", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() }) // after the server's own cleanup
	return serveOn(t, st, true, 2*time.Second, opts, defs...)
}

// serveOn serves the API of an engine with leases of leaseTTL on store,
// which several servers may share, as server processes share a
// database. With run false the engine does not run: runs started through
// it wait for another engine.
func serveOn(t testing.TB, st store.Store, run bool, leaseTTL time.Duration, opts Options, defs ...reprise.Definition) *testServer {
	t.Helper()
	return serveEngine(t, reprise.Config{Store: st, PollInterval: 50 * time.Millisecond, LeaseTTL: leaseTTL,
		ShutdownGrace: time.Second}, run, opts, defs...)
}

// serveEngine serves the API of an engine configured by cfg (its Store
// closed by the caller), running it if run.
func serveEngine(t testing.TB, cfg reprise.Config, run bool, opts Options, defs ...reprise.Definition) *testServer {
	t.Helper()
	st := cfg.Store
	e, err := reprise.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(defs...); err != nil {
		t.Fatal(err)
	}
	h, err := NewHandler(e, st, opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	c, err := NewClient(hs.URL, opts.Token)
	if err != nil {
		t.Fatal(err)
	}
	stop := func() {}
	if run {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- e.Run(ctx) }()
		stop = func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("engine: %v", err)
			}
		}
	}
	t.Cleanup(func() {
		c.Close()
		hs.Close()
		stop()
	})
	return &testServer{e: e, st: st, c: c, url: hs.URL, token: opts.Token, handle: h}
}

// dropSchema drops a test's PostgreSQL schema. It runs in a cleanup,
// when the test's context has ended.
func dropSchema(t testing.TB, dsn, schema string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
		t.Error(err)
	}
}

// call sends a raw request and returns the status and body.
func (s *testServer) call(t testing.TB, method, path, body string) (int, []byte) {
	t.Helper()
	return s.callAs(t, method, path, "application/json", body)
}

// callAs is call with a body of contentType.
func (s *testServer) callAs(t testing.TB, method, path, contentType, body string) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.url+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// wantProblem checks that a call answers a problem with status and field.
func (s *testServer) wantProblem(t *testing.T, method, path, body string, status int, field string) *Problem {
	t.Helper()
	got, b := s.call(t, method, path, body)
	var p Problem
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("%s %s %s: %d %s: not a problem: %v", method, path, body, got, b, err)
	}
	if got != status || p.Status != status || p.Field != field || p.Type == "" || p.Title == "" {
		t.Errorf("%s %s %s: got %d %+v, want status %d field %q", method, path, body, got, p, status, field)
	}
	return &p
}

// waitRun waits for run id to finish.
func (s *testServer) waitRun(t testing.TB, id string) *store.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		run, err := s.c.WaitRun(ctx, id, 5*time.Second)
		if err != nil {
			t.Fatalf("wait run %s: %v", id, err)
		}
		if run.Status.Final() {
			return run
		}
	}
}

var echo = reprise.NewWorkflow("echo", func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
	return in, nil
})

// sleeper waits an hour on a durable timer: a run that stays running.
var sleeper = reprise.NewWorkflow("sleeper", func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
	return nil, reprise.Sleep(ctx, time.Hour)
})
