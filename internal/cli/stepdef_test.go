package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"reprise/httpapi"
	"reprise/httpstep"
	"reprise/store"
)

// A serverProc is a reprise server process on a database of the test's,
// which a test may kill and start again.
type serverProc struct {
	t    *testing.T
	cmd  *exec.Cmd
	url  string
	mu   sync.Mutex
	rest bytes.Buffer // what it wrote, but the line that says where it listens
	done chan error   // its exit
	dead bool         // killed by the test
}

// spawnServer runs the reprise server binary on db, with more flags if
// given. Unless the test kills it, it is stopped with SIGINT when the test
// ends, and must exit cleanly.
func spawnServer(t *testing.T, db string, args ...string) *serverProc {
	t.Helper()
	return spawnServerEnv(t, db, nil, args...)
}

// spawnServerEnv is spawnServer with more environment variables.
func spawnServerEnv(t *testing.T, db string, env []string, args ...string) *serverProc {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and starts the reprise binary")
	}
	bin, err := buildReprise()
	if err != nil {
		t.Fatalf("build reprise: %v", err)
	}
	cmd := exec.Command(bin, append([]string{"server", "--addr", "127.0.0.1:0", "--db", db}, args...)...)
	cmd.Env = append(append(os.Environ(), "REPRISE_TOKEN=", "REPRISE_TOKENS="), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serverProc{t: t, cmd: cmd, done: make(chan error, 1)}
	lines := bufio.NewScanner(stderr)
	listening := regexp.MustCompile(`listening on (http://\S+)`)
	for lines.Scan() {
		if m := listening.FindStringSubmatch(lines.Text()); m != nil {
			p.url = m[1]
			break
		}
		t.Logf("server: %s", lines.Text())
		p.rest.WriteString(lines.Text() + "\n")
	}
	if p.url == "" {
		// On the way to the test's failure: their errors say nothing more.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal("the server did not say where it listens")
	}
	go func() {
		for lines.Scan() {
			p.mu.Lock()
			p.rest.WriteString(lines.Text() + "\n")
			p.mu.Unlock()
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if p.dead {
			return
		}
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Errorf("interrupt the server: %v", err)
		}
		select {
		case err := <-p.done:
			if err != nil {
				t.Errorf("server exit: %v\n%s", err, p.output())
			}
		case <-time.After(20 * time.Second):
			if err := cmd.Process.Kill(); err != nil {
				t.Errorf("kill the server: %v", err)
			}
			t.Errorf("the server did not stop on SIGINT\n%s", p.output())
		}
	})
	return p
}

func (p *serverProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rest.String()
}

// stop stops the server with SIGINT and waits for its clean exit.
func (p *serverProc) stop() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		p.t.Fatal(err)
	}
	p.dead = true
	if err := <-p.done; err != nil {
		p.t.Fatalf("server exit: %v\n%s", err, p.output())
	}
}

// kill kills the server with SIGKILL, as a crash would, and waits for it
// to be gone.
func (p *serverProc) kill() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatal(err)
	}
	p.dead = true
	var exit *exec.ExitError
	if err := <-p.done; !errors.As(err, &exit) || exit.ExitCode() != -1 {
		p.t.Fatalf("server exit: %v, want it killed\n%s", err, p.output())
	}
}

// stepEndpoint is an HTTP step endpoint that records the run of each call
// by path and answers as handle says.
type stepEndpoint struct {
	*httptest.Server
	mu    sync.Mutex
	calls map[string][]string
}

func newStepEndpoint(t *testing.T, handle func(path string, n int, w http.ResponseWriter)) *stepEndpoint {
	t.Helper()
	ep := &stepEndpoint{calls: map[string][]string{}}
	ep.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req httpstep.Request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Errorf("a step's request: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ep.mu.Lock()
		ep.calls[r.URL.Path] = append(ep.calls[r.URL.Path], req.RunID)
		n := len(ep.calls[r.URL.Path])
		ep.mu.Unlock()
		handle(r.URL.Path, n, w)
	}))
	t.Cleanup(ep.Close)
	return ep
}

// answer writes body as an endpoint's answer; the test fails if it
// cannot.
func answer(t *testing.T, w http.ResponseWriter, body string) {
	t.Helper()
	if _, err := io.WriteString(w, body); err != nil {
		t.Errorf("answer %s: %v", body, err)
	}
}

func (ep *stepEndpoint) runs(path string) []string {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return append([]string(nil), ep.calls[path]...)
}

// waitEvent follows a run's history until an event of the type, and
// returns the history after RunStarted up to it.
func waitEvent(t *testing.T, c *httpapi.Client, id string, typ store.EventType) []store.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var history []store.Event
	for {
		after := int64(1) // RunStarted: an after answers at once what follows it
		if len(history) > 0 {
			after = history[len(history)-1].Seq
		}
		events, err := c.WaitHistory(ctx, id, after, 10*time.Second)
		if err != nil {
			t.Fatalf("history of %s: %v", id, err)
		}
		for _, e := range events {
			history = append(history, e)
			if e.Type == typ {
				return history
			}
		}
	}
}

// waitRunLong waits for a run to finish through the API's long-poll, for
// longer than waitRun: a run whose engine was killed is taken over when
// its lease lapses.
func waitRunLong(t *testing.T, c *httpapi.Client, id string) *store.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for {
		run, err := c.WaitRun(ctx, id, 10*time.Second)
		if err != nil {
			t.Fatalf("wait run %s: %v", id, err)
		}
		if run.Status.Final() {
			return run
		}
	}
}

// kindDB returns a --db of the kind named: a SQLite file of the test's
// own, or, for "postgres", pgServerDB's schema.
func kindDB(t *testing.T, kind, prefix string) string {
	t.Helper()
	if kind == "postgres" {
		return pgServerDB(t, prefix)
	}
	return filepath.Join(t.TempDir(), "reprise.db")
}

// pgServerDB returns a --db URL of a schema of the test's own on the
// PostgreSQL server of REPRISE_TEST_POSTGRES, or skips the test.
func pgServerDB(t *testing.T, prefix string) string {
	t.Helper()
	dsn, schema, _ := testSchema(t, prefix)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + "search_path=" + schema
}

// TestServerKilledDuringBackoffKeepsItsAPISteps: a server killed with
// SIGKILL while an HTTP step registered through the API waits to retry
// finishes the run once started again, without the step being registered
// again: the registration is in the database.
func TestServerKilledDuringBackoffKeepsItsAPISteps(t *testing.T) {
	t.Parallel()
	for _, st := range []string{"sqlite", "postgres"} {
		t.Run(st, func(t *testing.T) {
			t.Parallel()
			db := filepath.Join(t.TempDir(), "reprise.db")
			if st == "postgres" {
				db = pgServerDB(t, "reprise_cli_stepdef_kill")
			}
			endpoint := newStepEndpoint(t, func(_ string, n int, w http.ResponseWriter) {
				if n == 1 {
					http.Error(w, "not now", http.StatusInternalServerError)
					return
				}
				answer(t, w, `{"success": true, "output": "charged"}`)
			})

			first := spawnServer(t, db)
			c := newClient(t, first.url)
			ctx := t.Context()
			err := c.RegisterStep(ctx, httpapi.Step{Name: "flaky", Kind: httpapi.KindHTTP, URL: endpoint.URL + "/flaky",
				Policy: "[retry: 3, backoff: 3s]"})
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := c.StartStep(ctx, "flaky", json.RawMessage(`{"amount": 42}`), "pay-1"); err != nil {
				t.Fatal(err)
			}
			history := waitEvent(t, c, "pay-1", store.EventAttemptFailed)
			failed := history[len(history)-1]
			first.kill() // in the backoff: the retry is 3 s away
			if !failed.RetryAt.After(failed.At) || len(endpoint.runs("/flaky")) != 1 {
				t.Fatalf("killed after %+v with calls %v; want it killed while the retry waits", failed, endpoint.runs("/flaky"))
			}

			second := spawnServer(t, db)
			c2 := newClient(t, second.url)
			run := waitRunLong(t, c2, "pay-1")
			if run.Status != store.RunCompleted || string(run.Output) != `"charged"` {
				t.Fatalf("run after the restart: %+v\nfirst server:\n%s\nsecond server:\n%s", run, first.output(), second.output())
			}
			if got := endpoint.runs("/flaky"); len(got) != 2 {
				t.Errorf("endpoint called %d times, want 2", len(got))
			}
			events, err := c2.History(ctx, "pay-1")
			if err != nil {
				t.Fatal(err)
			}
			started := eventsOf(events, store.EventAttemptStarted)
			if len(started) != 2 || started[0].Worker == started[1].Worker {
				t.Errorf("attempts started by %v, want two by different processes", started)
			}
			steps, err := c2.ListSteps(ctx)
			if err != nil || len(steps) == 0 || !hasStep(steps, "flaky", 1) {
				t.Errorf("steps after the restart: %v %+v", err, steps)
			}
		})
	}
}

func hasStep(steps []httpapi.Step, name string, version int) bool {
	for _, s := range steps {
		if s.Name == name && s.Version == version {
			return true
		}
	}
	return false
}

// TestServersShareStepDefinitions: three server processes on one
// PostgreSQL database share one registration: a step registered on one is
// listed and run by the others, and a registration of a new URL on one
// applies to the steps scheduled afterwards on any of them, while a step
// scheduled before keeps its URL for its retry.
func TestServersShareStepDefinitions(t *testing.T) {
	t.Parallel()
	db := pgServerDB(t, "reprise_cli_stepdef_share")
	entered, release := make(chan struct{}), make(chan struct{})
	endpoint := newStepEndpoint(t, func(path string, n int, w http.ResponseWriter) {
		if path == "/one" && n == 1 {
			close(entered)
			<-release
			http.Error(w, "not now", http.StatusInternalServerError)
			return
		}
		answer(t, w, `{"success": true, "output": "`+path+`"}`)
	})
	a, b, c := newClient(t, spawnServer(t, db).url), newClient(t, spawnServer(t, db).url), newClient(t, spawnServer(t, db).url)
	ctx := t.Context()
	register := func(c *httpapi.Client, path string) {
		t.Helper()
		err := c.RegisterStep(ctx, httpapi.Step{Name: "charge", Kind: httpapi.KindHTTP, URL: endpoint.URL + path,
			Policy: "[retry: 3, backoff: 100ms]"})
		if err != nil {
			t.Fatal(err)
		}
	}

	register(a, "/one")
	for i, other := range []*httpapi.Client{b, c} {
		steps, err := other.ListSteps(ctx)
		if err != nil || !hasStep(steps, "charge", 1) {
			t.Fatalf("server %d lists %v %+v; want charge version 1", i+2, err, steps)
		}
	}
	// Scheduled on b under version 1; its first attempt fails once c has
	// registered version 2.
	if _, _, err := b.StartStep(ctx, "charge", nil, "r1"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the first attempt never reached the endpoint")
	}
	register(c, "/two")
	// a registered version 1 and was told of no other.
	if _, _, err := a.StartStep(ctx, "charge", nil, "r2"); err != nil {
		t.Fatal(err)
	}
	close(release)
	for id, cl := range map[string]*httpapi.Client{"r1": b, "r2": a} {
		if run := waitRunLong(t, cl, id); run.Status != store.RunCompleted {
			t.Fatalf("run %s: %+v", id, run)
		}
	}
	one, two := endpoint.runs("/one"), endpoint.runs("/two")
	if fmt.Sprint(one) != "[r1 r1]" || fmt.Sprint(two) != "[r2]" {
		t.Fatalf("calls: /one %v, /two %v; want r1's two attempts at /one and r2's at /two", one, two)
	}
	for _, cl := range []*httpapi.Client{a, b, c} {
		steps, err := cl.ListSteps(ctx)
		if err != nil || !hasStep(steps, "charge", 2) {
			t.Fatalf("steps: %v %+v; want charge version 2", err, steps)
		}
	}
}
