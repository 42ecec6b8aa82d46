package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reprise"
	"reprise/sqlite"
)

// testServer is the API of a running real-clock engine on a temporary
// SQLite database.
type testServer struct {
	e      *reprise.Engine
	c      *Client
	url    string
	token  string
	handle http.Handler
}

func newTestServer(t testing.TB, opts Options, defs ...reprise.Definition) *testServer {
	t.Helper()
	store, err := sqlite.Open(filepath.Join(t.TempDir(), "reprise.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := reprise.New(reprise.Config{Store: store, PollInterval: 50 * time.Millisecond, LeaseTTL: 2 * time.Second,
		ShutdownGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(defs...); err != nil {
		t.Fatal(err)
	}
	h, err := NewHandler(e, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	hs := httptest.NewServer(h)
	c, err := NewClient(hs.URL, opts.Token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		hs.Close()
		cancel()
		<-done
		store.Close()
	})
	return &testServer{e: e, c: c, url: hs.URL, token: opts.Token, handle: h}
}

// call sends a raw request and returns the status and body.
func (s *testServer) call(t testing.TB, method, path, body string) (int, []byte) {
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
		req.Header.Set("Content-Type", "application/json")
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
func (s *testServer) waitRun(t testing.TB, id string) *reprise.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
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
