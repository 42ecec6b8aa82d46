package webui_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"reprise"
	"reprise/sqlite"
	"reprise/store"
	"reprise/webui"
)

// netError is a connection reset, as a policy sees it.
type netError struct{}

func (netError) Error() string     { return "connection reset by peer" }
func (netError) ErrorType() string { return "NetworkError" }

type declined struct{}

func (declined) Error() string     { return "card declined" }
func (declined) ErrorType() string { return "CardDeclined" }

// The workflows of the tests: flaky's step fails twice, then succeeds;
// slow's step fails and waits an hour for its next attempt; doomed's step
// fails for good; waiter waits for a signal; lost calls a step nobody
// registered.
var (
	flakyStep = reprise.NewStep("flaky.call", func(ctx context.Context, in string) (string, error) {
		if info, _ := reprise.StepInfoFrom(ctx); info.Attempt < 3 {
			return "", netError{}
		}
		return "done " + in, nil
	}, reprise.WithPolicyText("[retry: 3, backoff: 50ms]"))
	slowStep = reprise.NewStep("slow.call", func(ctx context.Context, in string) (string, error) {
		return "", netError{}
	}, reprise.WithPolicyText("[retry: 5, backoff: 1h]"))
	doomedStep = reprise.NewStep("doomed.call", func(ctx context.Context, in string) (string, error) {
		return "", reprise.Permanent(declined{})
	}, reprise.WithPolicyText("[retry: 2]"))

	flakyWorkflow = reprise.NewWorkflow("flaky", func(ctx context.Context, in string) (string, error) {
		return reprise.Step(ctx, flakyStep, in)
	})
	slowWorkflow = reprise.NewWorkflow("slow", func(ctx context.Context, in string) (string, error) {
		return reprise.Step(ctx, slowStep, in)
	})
	doomedWorkflow = reprise.NewWorkflow("doomed", func(ctx context.Context, in string) (string, error) {
		return reprise.Step(ctx, doomedStep, in)
	})
	waiterWorkflow = reprise.NewWorkflow("waiter", func(ctx context.Context, in string) (string, error) {
		return reprise.WaitSignal[string](ctx, "go").Get(ctx)
	})
	lostWorkflow = reprise.NewWorkflow("lost", func(ctx context.Context, in string) (string, error) {
		return reprise.Call[string](ctx, "nowhere", in)
	})
)

// fixture is a running engine on a temporary SQLite database, with the
// web page served by an httptest server.
type fixture struct {
	e     *reprise.Engine
	st    store.Store
	url   string
	token string
	log   *syncBuffer
}

// syncBuffer is the page's log, to check it holds no token.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newFixture serves the page of a new engine, with a login when token is
// set.
func newFixture(t *testing.T, token string) *fixture {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "reprise.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e, err := reprise.New(reprise.Config{Store: st, PollInterval: 20 * time.Millisecond, ShutdownGrace: time.Second,
		UnclaimedAfter: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(flakyStep, slowStep, doomedStep, linkStep, flakyWorkflow, slowWorkflow, doomedWorkflow, waiterWorkflow,
		lostWorkflow, linkWorkflow); err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	cfg := webui.Config{Engine: e, Store: st, PollInterval: 20 * time.Millisecond, StreamFor: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(log, nil))}
	if token != "" {
		cfg.Tokens = []string{token}
	}
	ui, err := webui.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(ui)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("engine: %v", err)
		}
	})
	return &fixture{e: e, st: st, url: hs.URL, token: token, log: log}
}

// start starts a run of wf with id.
func (f *fixture) start(t *testing.T, wf string, id string) {
	t.Helper()
	if _, _, err := f.e.StartRun(t.Context(), wf, []byte(`"x"`), reprise.WithRunID(id)); err != nil {
		t.Fatal(err)
	}
}

// waitFor waits until the run's history satisfies ok.
func (f *fixture) waitFor(t *testing.T, id string, what string, ok func([]reprise.Event) bool) []reprise.Event {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		events, err := f.e.History(t.Context(), id)
		if err != nil && !errors.Is(err, reprise.ErrNotFound) {
			t.Fatal(err)
		}
		if ok(events) {
			return events
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s: no %s in 20s; history: %+v", id, what, events)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// has reports whether events hold one of type typ.
func has(typ reprise.EventType) func([]reprise.Event) bool {
	return func(events []reprise.Event) bool {
		for _, ev := range events {
			if ev.Type == typ {
				return true
			}
		}
		return false
	}
}

// waitRetrying waits until the run waits for a retry.
func (f *fixture) waitRetrying(t *testing.T, id string) {
	t.Helper()
	f.waitFor(t, id, "retry planned", func(events []reprise.Event) bool {
		for _, ev := range events {
			if ev.Type == store.EventAttemptFailed && !ev.RetryAt.IsZero() {
				return true
			}
		}
		return false
	})
}

// A client is a browser without JavaScript: it keeps cookies, and does
// not follow redirects, so that tests see them.
type client struct {
	t    *testing.T
	base string
	c    *http.Client
}

func (f *fixture) client(t *testing.T) *client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &client{t: t, base: f.url, c: &http.Client{Jar: jar, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// answer is a response, read.
type answer struct {
	status int
	header http.Header
	body   string
}

func (c *client) do(req *http.Request) answer {
	c.t.Helper()
	resp, err := c.c.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

func (c *client) get(path string) answer {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.base+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.do(req)
}

// post posts a form; headers are name, value pairs.
func (c *client) post(path string, form url.Values, headers ...string) answer {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return c.do(req)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf returns the CSRF token of the forms of the page at path.
func (c *client) csrf(path string) string {
	c.t.Helper()
	a := c.get(path)
	m := csrfField.FindStringSubmatch(a.body)
	if m == nil {
		c.t.Fatalf("GET %s: %d, no csrf field in:\n%s", path, a.status, a.body)
	}
	return m[1]
}

// login signs in with token.
func (c *client) login(token string) answer {
	c.t.Helper()
	return c.post("/login", url.Values{"csrf": {c.csrf("/login")}, "token": {token}, "next": {"/"}})
}

func (a answer) String() string { return fmt.Sprintf("%d %s", a.status, a.body) }
