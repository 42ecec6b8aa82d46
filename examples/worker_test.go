// Package examples holds workers in other languages, and the tests that
// run them against the API.
package examples

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"reprise"
	"reprise/httpapi"
	"reprise/internal/cli"
	"reprise/store"
)

// TestPythonWorkerOutlivesServer runs worker.py against the reprise
// server, kills the server with SIGKILL while the worker works on a task,
// lets a stand-in proxy answer 503 in its place, and starts it again on
// the same address and database: the same worker process finishes the
// task and every run started before and after, reports the outage once,
// does not register its step again, and stops cleanly on SIGTERM.
func TestPythonWorkerOutlivesServer(t *testing.T) {
	t.Parallel()
	python := lookPython(t)
	const token = "example-token-0123456789"
	db := filepath.Join(t.TempDir(), "reprise.db")
	// The same engine id: the restarted engine takes its runs back at once.
	args := []string{"--token", token, "--worker-id", "engine-1"}
	first := startServer(t, "127.0.0.1:0", db, args...)
	addr := strings.TrimPrefix(first.url, "http://")
	c := newClient(t, first.url, token)
	w := startWorker(t, python, "--server", first.url, "--token", token)
	waitStep(t, c, "text.upper", 1)

	startRun(t, c, "before-1", `{"text": "one", "fail_until_attempt": 1}`)
	startRun(t, c, "before-2", `{"text": "two"}`)
	checkOutput(t, c, "before-1", "ONE", 2)
	checkOutput(t, c, "before-2", "TWO", 1)

	// Killed while the worker works: it cannot send the result.
	startRun(t, c, "across", `{"text": "across", "sleep_ms": 300}`)
	w.waitLog(t, "claimed across")
	first.kill(t)
	w.waitLog(t, "unreachable")
	// A proxy answers 503 while the server is away.
	tries := make(chan struct{}, 100)
	proxy := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Connection", "close")
		http.Error(rw, "the server is restarting", http.StatusServiceUnavailable)
		select {
		case tries <- struct{}{}:
		default:
		}
	})}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- proxy.Serve(ln) }()
	select {
	case <-tries:
	case <-time.After(10 * time.Second):
		t.Fatalf("the worker did not try again through the proxy\n%s", w.output())
	}
	proxy.Close()
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("the proxy: %v", err)
	}

	second := startServer(t, addr, db, args...)
	c = newClient(t, second.url, token)
	checkOutput(t, c, "across", "ACROSS", 1)
	startRun(t, c, "after-1", `{"text": "three", "fail_until_attempt": 1}`)
	startRun(t, c, "after-2", `{"text": "four"}`)
	checkOutput(t, c, "after-1", "THREE", 2)
	checkOutput(t, c, "after-2", "FOUR", 1)

	w.stop(t)
	out := w.output()
	for _, want := range []struct {
		pattern string
		n       int
	}{
		{"registered step text.upper version 1", 1}, // the server kept it
		{"unreachable", 1},                          // once per outage
		{"answers again", 1},
		{"completed across text.upper attempt 1", 1},
		{"stopped", 1},
	} {
		if n := strings.Count(out, want.pattern); n != want.n {
			t.Errorf("the worker said %q %d times, want %d", want.pattern, n, want.n)
		}
	}
	if t.Failed() {
		t.Logf("worker said:\n%s", out)
	}
}

// TestPythonWorkerLease runs worker.py against a server whose leases last
// 1 s: heartbeats keep the lease of an attempt that takes longer; a worker
// stopped (SIGSTOP) past its lease drops its result and goes on with the
// retry; a worker whose step was deleted registers it again.
func TestPythonWorkerLease(t *testing.T) {
	t.Parallel()
	python := lookPython(t)
	srv := startServer(t, "127.0.0.1:0", filepath.Join(t.TempDir(), "reprise.db"), "--lease-ttl", "1s")
	c := newClient(t, srv.url, "")
	w := startWorker(t, python, "--server", srv.url, "--wait", "1")
	waitStep(t, c, "text.upper", 1)

	// Attempt 1 loses its lease while the worker is stopped; attempt 2
	// takes 1.5 s under 1 s leases.
	startRun(t, c, "slow", `{"text": "slow", "sleep_ms": 1500}`)
	w.waitLog(t, "claimed slow")
	if err := w.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	history := waitEvent(t, c, "slow", store.EventAttemptFailed)
	if err := w.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if e := history[len(history)-1]; e.Attempt != 1 || e.Error == nil || e.Error.Type != reprise.TypeWorkerLost {
		t.Errorf("attempt failed: %+v %+v, want attempt 1 failed as WorkerLost", e, e.Error)
	}
	checkOutput(t, c, "slow", "SLOW", 2)
	w.waitLog(t, "slow text.upper attempt 1: lease lost")

	// A deleted step is registered again at the next claim.
	if err := c.DeleteStep(t.Context(), "text.upper", false); err != nil {
		t.Fatal(err)
	}
	waitStep(t, c, "text.upper", 2)
	startRun(t, c, "again", `{"text": "again"}`)
	checkOutput(t, c, "again", "AGAIN", 1)

	w.stop(t)
	if out := w.output(); strings.Count(out, "lease lost") != 1 || !strings.Contains(out, "registering it again") {
		t.Errorf("worker said:\n%s", out)
	}
}

// lookPython finds python3, or skips the test; CI sets
// REPRISE_REQUIRE_PYTHON, where a missing python3 fails it instead.
func lookPython(t *testing.T) string {
	t.Helper()
	python, err := exec.LookPath("python3")
	switch {
	case err != nil && os.Getenv("REPRISE_REQUIRE_PYTHON") != "":
		t.Fatal("python3 is not installed, and REPRISE_REQUIRE_PYTHON says the Python worker example must run")
	case err != nil:
		t.Skip("python3 is not installed; the Python worker example cannot run")
	}
	return python
}

// TestMain runs the reprise command instead of the tests when a test
// starts this binary as its server: a real server process, which a test
// can kill and start again, without building cmd/reprise.
func TestMain(m *testing.M) {
	if os.Getenv("REPRISE_EXAMPLES_RUN_CLI") == "1" {
		os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// A server is a reprise server process, which the test may kill.
type server struct {
	cmd  *exec.Cmd
	url  string
	out  logBuffer  // what it wrote
	done chan error // its exit
	dead bool       // killed by the test
}

var listening = regexp.MustCompile(`listening on (http://\S+)`)

// startServer runs the reprise server on addr and db, in a process of its
// own (see TestMain). Unless the test kills it, it is stopped with SIGINT
// when the test ends, and must exit cleanly.
func startServer(t *testing.T, addr, db string, args ...string) *server {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s := &server{done: make(chan error, 1)}
	s.cmd = exec.Command(self, append([]string{"server", "--addr", addr, "--db", db}, args...)...)
	s.cmd.Env = append(os.Environ(), "REPRISE_EXAMPLES_RUN_CLI=1", "REPRISE_TOKEN=", "REPRISE_TOKENS=", "REPRISE_WORKER_ID=")
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.out
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() {
		if s.dead {
			return
		}
		if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Errorf("stop the server: %v\n%s", err, s.out.String())
			return
		}
		select {
		case err := <-s.done:
			if err != nil {
				t.Errorf("server exit: %v\n%s", err, s.out.String())
			}
		case <-time.After(20 * time.Second):
			t.Errorf("the server did not stop on SIGINT (killed: %v)\n%s", s.cmd.Process.Kill(), s.out.String())
		}
	})
	m, err := s.out.wait(listening, 10*time.Second, s.done)
	if err != nil {
		s.dead = true
		// It may have exited, which is why it did not say.
		t.Fatalf("the server did not say where it listens: %v (killed: %v)\n%s", err, s.cmd.Process.Kill(), s.out.String())
	}
	s.url = m[1]
	return s
}

// kill kills the server with SIGKILL, as a crash would, and waits for it
// to be gone.
func (s *server) kill(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill the server: %v\n%s", err, s.out.String())
	}
	s.dead = true
	if err := <-s.done; err == nil {
		t.Fatalf("the server exited on its own before the kill\n%s", s.out.String())
	}
}

// A worker is a worker.py process.
type worker struct {
	cmd     *exec.Cmd
	out     logBuffer
	done    chan error
	stopped bool // by the test
}

// startWorker runs worker.py with args; it is killed when the test ends,
// unless the test has stopped it.
func startWorker(t *testing.T, python string, args ...string) *worker {
	t.Helper()
	w := &worker{done: make(chan error, 1)}
	w.cmd = exec.Command(python, append([]string{"worker.py"}, args...)...)
	w.cmd.Stdout, w.cmd.Stderr = &w.out, &w.out
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { w.done <- w.cmd.Wait() }()
	t.Cleanup(func() {
		if w.stopped {
			return
		}
		// Killed, it exits with an error; without one, it had ended on
		// its own, which only SIGTERM (stop) should make it do.
		if err := w.cmd.Process.Kill(); err != nil {
			t.Errorf("kill the worker: %v\n%s", err, w.output())
		}
		if err := <-w.done; err == nil {
			t.Errorf("the worker exited on its own\n%s", w.output())
		}
	})
	return w
}

func (w *worker) output() string { return w.out.String() }

// waitLog waits until the worker has said s.
func (w *worker) waitLog(t *testing.T, s string) {
	t.Helper()
	if _, err := w.out.wait(regexp.MustCompile(regexp.QuoteMeta(s)), 10*time.Second, w.done); err != nil {
		t.Fatalf("the worker did not say %q: %v\n%s", s, err, w.output())
	}
}

// stop sends SIGTERM, which must stop the worker at once (it is waiting
// for tasks) and cleanly.
func (w *worker) stop(t *testing.T) {
	t.Helper()
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("stop the worker: %v\n%s", err, w.output())
	}
	select {
	case err := <-w.done:
		w.stopped = true
		if err != nil {
			t.Errorf("worker exit: %v\n%s", err, w.output())
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the worker did not stop on SIGTERM\n%s", w.output())
	}
}

// A logBuffer collects a process's output and tells who waits for a line
// when one comes.
type logBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed at the next write
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// wait waits until the output matches re and returns the match; it fails
// after timeout, or when exited says the process has ended.
func (b *logBuffer) wait(re *regexp.Regexp, timeout time.Duration, exited chan error) ([]string, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		b.mu.Lock()
		m := re.FindStringSubmatch(b.buf.String())
		if b.changed == nil {
			b.changed = make(chan struct{})
		}
		changed := b.changed
		b.mu.Unlock()
		if m != nil {
			return m, nil
		}
		select {
		case <-changed:
		case err := <-exited:
			exited <- err // for the one that waits for the exit
			return nil, fmt.Errorf("exited: %v", err)
		case <-deadline.C:
			return nil, errors.New("timed out")
		}
	}
}

func newClient(t *testing.T, url, token string) *httpapi.Client {
	t.Helper()
	c, err := httpapi.NewClient(url, token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitStep waits until the step's current version is version.
func waitStep(t *testing.T, c *httpapi.Client, name string, version int) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		s, err := c.GetStep(t.Context(), name, 0)
		if err == nil && s.Version == version {
			return
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get step %s: %v", name, err)
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("step %s: not at version %d (%+v)", name, version, s)
		}
	}
}

func startRun(t *testing.T, c *httpapi.Client, id, input string) {
	t.Helper()
	if _, _, err := c.StartStep(t.Context(), "text.upper", json.RawMessage(input), id); err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
}

// checkOutput waits for a run to finish, and checks it completed with
// the output of the attempt.
func checkOutput(t *testing.T, c *httpapi.Client, id, upper string, attempt int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	run, err := c.WaitRun(ctx, id, 0)
	for err == nil && !run.Status.Final() {
		run, err = c.WaitRun(ctx, id, 10*time.Second)
	}
	if err != nil {
		t.Fatalf("wait run %s: %v", id, err)
	}
	var got struct {
		Upper   string `json:"upper"`
		Attempt int    `json:"attempt"`
	}
	if run.Status == store.RunCompleted {
		if err := json.Unmarshal(run.Output, &got); err != nil {
			t.Fatalf("run %s: output %s: %v", id, run.Output, err)
		}
	}
	if run.Status != store.RunCompleted || got.Upper != upper || got.Attempt != attempt {
		t.Errorf("run %s: %s %s; want completed with %q on attempt %d", id, run.Status, run.Output, upper, attempt)
	}
}

// waitEvent follows a run's history until an event of the type, and
// returns the history up to it.
func waitEvent(t *testing.T, c *httpapi.Client, id string, typ store.EventType) []store.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	history, err := c.History(ctx, id)
	for err == nil {
		for i, e := range history {
			if e.Type == typ {
				return history[:i+1]
			}
		}
		var more []store.Event
		more, err = c.WaitHistory(ctx, id, history[len(history)-1].Seq, 10*time.Second)
		history = append(history, more...)
	}
	t.Fatalf("history of %s: %v", id, err)
	return nil
}
