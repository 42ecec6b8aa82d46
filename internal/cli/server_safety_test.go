package cli

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
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
	"reprise/store"
)

// runningServer is a real reprise server process.
type runningServer struct {
	cmd  *exec.Cmd
	url  string
	addr string
	log  *serverLog    // all the server wrote to stderr
	done chan struct{} // closed when it has exited; then err is set
	err  error
}

// serverLog collects a process's output for the test to read.
type serverLog struct {
	mu sync.Mutex
	b  strings.Builder
}

// addLine adds a line the process wrote.
func (b *serverLog) addLine(line string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.WriteString(line + "\n")
}

func (b *serverLog) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// runServer starts the reprise binary's server with args (and no token
// from the environment) on a free loopback port, waits until it listens,
// and stops it with SIGINT when the test ends unless it has ended.
func runServer(t *testing.T, args ...string) *runningServer {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and starts the reprise binary")
	}
	bin, err := buildReprise()
	if err != nil {
		t.Fatalf("build reprise: %v", err)
	}
	cmd := exec.Command(bin, append([]string{"server", "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), "REPRISE_TOKEN=", "REPRISE_TOKENS=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &runningServer{cmd: cmd, log: &serverLog{}, done: make(chan struct{})}
	listening := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`listening on (http://\S+)`)
		lines := bufio.NewScanner(stderr)
		for lines.Scan() {
			p.log.addLine(lines.Text())
			if m := re.FindStringSubmatch(lines.Text()); m != nil {
				listening <- m[1]
			}
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	select {
	case p.url = <-listening:
	case <-p.done:
		t.Fatalf("the server exited (%v) before it listened:\n%s", p.err, p.log)
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill() // on the way to the test's failure: its error says nothing more
		t.Fatalf("the server did not say where it listens:\n%s", p.log)
	}
	p.addr = strings.TrimPrefix(p.url, "http://")
	t.Cleanup(func() {
		select {
		case <-p.done:
			return
		default:
		}
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Errorf("interrupt the server: %v", err)
		}
		select {
		case <-p.done:
			if p.err != nil {
				t.Errorf("server exit: %v\n%s", p.err, p.log)
			}
		case <-time.After(20 * time.Second):
			if err := cmd.Process.Kill(); err != nil {
				t.Errorf("kill the server: %v", err)
			}
			t.Errorf("the server did not stop on SIGINT\n%s", p.log)
		}
	})
	return p
}

// newToken returns a random token.
func newToken() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// slowRequest opens a connection that sends the head of a request, then
// trickles its body a byte every 100 ms (or, with headersOnly, trickles
// its headers) until the server closes the connection. It returns when
// the server has closed it, with what the server answered and when.
func slowRequest(addr, token string, headersOnly bool, limit time.Duration) (answer string, closedAfter time.Duration, err error) {
	start := time.Now()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return "", 0, err
	}
	defer conn.Close()
	head := "POST /v1/runs HTTP/1.1\r\nHost: reprise\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n"
	if token != "" {
		head += "Authorization: Bearer " + token + "\r\n"
	}
	if headersOnly {
		head = "POST /v1/runs HTTP/1.1\r\n"
	} else {
		head += "\r\n{"
	}
	if _, err := io.WriteString(conn, head); err != nil {
		return "", 0, err
	}
	read := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(conn) // until the server closes (or resets) it
		read <- string(b)
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		select {
		case answer := <-read:
			return answer, time.Since(start), nil
		case <-deadline.C:
			return "", time.Since(start), fmt.Errorf("still open after %v", limit)
		case <-tick.C:
			b := " "
			if headersOnly {
				b = "X-Slow: 1\r\n"
			}
			_, _ = io.WriteString(conn, b) // fails once the server has closed its side, which the read says
		}
	}
}

// TestServerSlowClients: clients that send their headers or bodies slowly,
// with the token or without, are cut off by the read timeouts (without the
// token, at once), and /healthz answers all the while.
func TestServerSlowClients(t *testing.T) {
	t.Parallel()
	token := newToken()
	const timeout = time.Second
	p := runServer(t, "--db", filepath.Join(t.TempDir(), "reprise.db"), "--token", token,
		"--read-header-timeout", timeout.String(), "--read-timeout", timeout.String())
	// The time a slow client may keep its connection: the timeout, and
	// the half-second net/http waits after a last answer before it closes.
	limit := timeout + 2*time.Second

	healthDone := make(chan struct{})
	var healthErrs []string
	var healthCalls int
	stopHealth := make(chan struct{})
	go func() {
		defer close(healthDone)
		client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		for {
			select {
			case <-stopHealth:
				return
			case <-time.After(50 * time.Millisecond):
			}
			healthCalls++
			resp, err := client.Get(p.url + "/healthz")
			if err != nil {
				healthErrs = append(healthErrs, err.Error())
				continue
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				healthErrs = append(healthErrs, resp.Status)
			}
		}
	}()

	type kind struct {
		name        string
		token       string
		headersOnly bool
		refused     bool // answered 401 and closed at once
	}
	kinds := []kind{
		{name: "body without a token", refused: true},
		{name: "body with a wrong token", token: newToken(), refused: true},
		{name: "body with the token", token: token},
		{name: "headers", headersOnly: true},
	}
	type result struct {
		kind
		answer string
		after  time.Duration
		err    error
	}
	results := make(chan result)
	const each = 40
	for _, k := range kinds {
		for range each {
			go func() {
				answer, after, err := slowRequest(p.addr, k.token, k.headersOnly, 3*limit)
				results <- result{k, answer, after, err}
			}()
		}
	}
	for range each * len(kinds) {
		r := <-results
		switch {
		case r.err != nil:
			t.Errorf("%s: %v", r.name, r.err)
		case r.after > limit:
			t.Errorf("%s: closed after %v, want %v at most", r.name, r.after, limit)
		case r.refused && !strings.HasPrefix(r.answer, "HTTP/1.1 401"):
			t.Errorf("%s: answered %q, want a 401", r.name, r.answer)
		case r.refused && r.after > timeout:
			t.Errorf("%s: closed after %v; a request without the token is closed at once", r.name, r.after)
		}
	}
	close(stopHealth)
	<-healthDone
	if len(healthErrs) > 0 || healthCalls < 10 {
		t.Errorf("/healthz, %d calls: %d failed: %q", healthCalls, len(healthErrs), healthErrs)
	}
}

// TestServerMaxConns: past --max-conns, a connection waits for a place,
// which a connection cut off by its timeout gives back.
func TestServerMaxConns(t *testing.T) {
	t.Parallel()
	const timeout = time.Second
	p := runServer(t, "--db", filepath.Join(t.TempDir(), "reprise.db"), "--max-conns", "4",
		"--read-header-timeout", timeout.String())
	idle := make([]net.Conn, 4)
	for i := range idle {
		c, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		idle[i] = c
	}
	start := time.Now()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(p.url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	waited := time.Since(start)
	if resp.StatusCode != http.StatusOK || waited < timeout/2 {
		t.Errorf("/healthz beside 4 idle connections of 4: %s after %v; want 200 after their %v", resp.Status, waited, timeout)
	}
	// The idle connections were closed.
	for _, c := range idle {
		if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Read(make([]byte, 1)); err == nil || os.IsTimeout(err) {
			t.Errorf("an idle connection: %v, want it closed", err)
		}
	}
}

// TestServerSecretsStaySecret runs a session against the real server and
// looks for the token and the database's password in its log and in every
// answer: neither appears. A 500 answers an error id, which the log line
// of the error carries.
func TestServerSecretsStaySecret(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		testSecrets(t, "sqlite:"+filepath.Join(t.TempDir(), "reprise.db"), "", nil)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dsn, schema, conn := testSchema(t, "reprise_cli_secrets")
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		password, ok := u.User.Password()
		if !ok {
			// The test server trusts its clients: a password is sent,
			// and ignored.
			password = "pw-" + newToken()
		}
		u.User = url.UserPassword(u.User.Username(), password)
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		// A 500: the runs table is renamed away for one request.
		fail := func(call func(method, path, body string) (int, []byte)) (int, []byte) {
			if _, err := conn.Exec(t.Context(), "ALTER TABLE "+schema+".reprise_run RENAME TO reprise_run_away"); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if _, err := conn.Exec(t.Context(), "ALTER TABLE "+schema+".reprise_run_away RENAME TO reprise_run"); err != nil {
					t.Fatal(err)
				}
			}()
			return call("GET", "/v1/runs", "")
		}
		testSecrets(t, u.String(), password, fail)
	})
}

// testSecrets runs the session on db; fail, if not nil, makes a request
// fail with a 500.
func testSecrets(t *testing.T, db, password string, fail func(call func(method, path, body string) (int, []byte)) (int, []byte)) {
	token := newToken()
	p := runServer(t, "--db", db, "--token", token)
	var answers strings.Builder
	client := &http.Client{Timeout: 30 * time.Second}
	call := func(method, path, body string, header ...string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, p.url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if err := resp.Header.Write(&answers); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&answers, "%s %s: %d %s\n", method, path, resp.StatusCode, b)
		return resp.StatusCode, b
	}
	for _, c := range []struct {
		method, path, body string
		status             int
	}{
		{"GET", "/healthz", "", 200},
		{"POST", "/v1/runs", `{"workflow":"order","id":"o1","input":{"id":"A-1","item":"mug","amount_cents":900,"address":"x"}}`, 201},
		{"GET", "/v1/runs", "", 200},
		{"GET", "/v1/runs/o1?wait=1s", "", 200},
		{"GET", "/v1/runs/o1/history", "", 200},
		{"POST", "/v1/steps", `{"name":"work","kind":"pull"}`, 201},
		{"GET", "/v1/steps", "", 200},
		{"POST", "/v1/tasks/claim", `{"worker":"w","steps":["work"],"wait":"10ms"}`, 200},
		{"POST", "/v1/tasks/claim", `{"worker":"w","steps":["nope"]}`, 400},
		{"POST", "/v1/runs", `{"workflow":`, 400},
		{"GET", "/v1/runs/nope", "", 404},
		{"DELETE", "/v1/runs", "", 405},
		{"GET", "/metrics", "", 200},
	} {
		if status, body := call(c.method, c.path, c.body); status != c.status {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, status, body, c.status)
		}
	}
	// Without the token, and with a wrong one.
	for _, h := range []string{"", "Bearer " + token[:len(token)-1], "Bearer " + token + "x", token} {
		if status, _ := call("GET", "/v1/runs", "", "Authorization", h); status != 401 {
			t.Errorf("Authorization %q: %d, want 401", h, status)
		}
	}
	if run := waitRun(t, newClientToken(t, p.url, token), "o1"); run.Status != store.RunCompleted {
		t.Errorf("run o1: %+v", run)
	}
	// The run is over before the store fails under the server.
	if fail != nil {
		status, body := fail(func(method, path, body string) (int, []byte) { return call(method, path, body) })
		var prob httpapi.Problem
		if err := json.Unmarshal(body, &prob); err != nil || status != 500 || prob.ErrorID == "" {
			t.Fatalf("a failing store: %d %s, want a 500 with an error id", status, body)
		}
		if strings.Contains(string(body), "reprise_run") || strings.Contains(string(body), "exist") {
			t.Errorf("the 500 tells of the error: %s", body)
		}
		line := regexp.MustCompile(`(?m)^.*error_id=` + prob.ErrorID + `.*$`).FindString(waitLog(t, p, "error_id="+prob.ErrorID))
		if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "reprise_run") {
			t.Errorf("the log line of error %s: %q, want the error at level ERROR", prob.ErrorID, line)
		}
	}
	for _, secret := range []string{token, password} {
		if secret == "" {
			continue
		}
		if strings.Contains(p.log.String(), secret) {
			t.Errorf("the log holds a secret:\n%s", p.log)
		}
		if strings.Contains(answers.String(), secret) {
			t.Errorf("an answer holds a secret:\n%s", answers.String())
		}
	}
	if password != "" && !strings.Contains(p.log.String(), ":xxxxx@") {
		t.Errorf("the log does not name the database, redacted:\n%s", p.log)
	}
}

// waitLog waits for the server's log to hold s, and returns the log.
func waitLog(t *testing.T, p *runningServer, s string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.log.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("the log lacks %q:\n%s", s, p.log)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return p.log.String()
}

func newClientToken(t *testing.T, url, token string) *httpapi.Client {
	t.Helper()
	c, err := httpapi.NewClient(url, token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestServerOneProcessPerSQLiteFile: a second server on a SQLite file a
// server runs on is refused at start, with the reason; the read commands
// work beside the server; after a kill -9 of the server, a new one starts
// at once.
func TestServerOneProcessPerSQLiteFile(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "reprise.db")
	first := runServer(t, "--db", db)
	c := newClient(t, first.url)
	if _, _, err := c.StartRun(t.Context(), "order", json.RawMessage(`{"id":"A-1","item":"mug","amount_cents":900,"address":"x"}`), "o1"); err != nil {
		t.Fatal(err)
	}
	waitRun(t, c, "o1")

	bin, err := buildReprise()
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"server", "--addr", "127.0.0.1:0", "--db", db},
		{"server", "--addr", "127.0.0.1:0", "--db", "sqlite:" + db},
		{"demo", "--db", db},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		cancel()
		code := -1
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		if code != exitFail || !strings.Contains(string(out), "in use by another process") ||
			!strings.Contains(string(out), fmt.Sprintf("process %d", first.cmd.Process.Pid)) ||
			!strings.Contains(string(out), "PostgreSQL") {
			t.Errorf("reprise %s beside a server: exit %d (%v): %s", strings.Join(args, " "), code, err, out)
		}
	}
	for _, args := range [][]string{{"runs", "--db", db}, {"show", "o1", "--db", db}, {"history", "o1", "--db", db}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "o1") && !strings.Contains(string(out), "inventory.reserve") {
			t.Errorf("reprise %s beside a server: %v: %s", strings.Join(args, " "), err, out)
		}
	}

	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.done
	second := runServer(t, "--db", db)
	run, err := newClient(t, second.url).GetRun(t.Context(), "o1")
	if err != nil || run.Status != store.RunCompleted {
		t.Errorf("run o1 after the restart: %v %+v", err, run)
	}
}

// TestServerConfigErrors: bad tokens and timeouts are refused at start,
// each with what is wrong.
func TestServerConfigErrors(t *testing.T) {
	// Not parallel: it sets the environment.
	t.Setenv("REPRISE_TOKEN", "")
	t.Setenv("REPRISE_TOKENS", "")
	db := filepath.Join(t.TempDir(), "reprise.db")
	for _, c := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"--token", "short"}, nil, "token 1 has 5 characters; a token needs 16 or more"},
		{[]string{"--token", strings.Repeat(" ", 20)}, nil, "token 1 is blank"},
		{[]string{"--token", "0123456789abcdef,"}, nil, "token 2 is blank"},
		{[]string{"--token", "0123456789abcdef", "--token", "0123456789abcdeé"}, nil, "token 2 holds a space or a character other than printable ASCII"},
		{nil, []string{"REPRISE_TOKENS=0123456789abcdef,short"}, "token 2 has 5 characters"},
		{nil, []string{"REPRISE_TOKEN=short"}, "token 1 has 5 characters"},
		{[]string{"--write-timeout", "30s"}, nil, "--write-timeout 30s is too short: a long-poll waits up to 1m0s"},
		{[]string{"--read-timeout", "0s"}, nil, "--read-timeout 0s must be positive"},
		{[]string{"--read-header-timeout", "-1s"}, nil, "--read-header-timeout -1s must be positive"},
		{[]string{"--idle-timeout", "0s"}, nil, "--idle-timeout 0s must be positive"},
		{[]string{"--max-conns", "0"}, nil, "--max-conns 0 must be positive"},
		{[]string{"--max-body", "0"}, nil, "--max-body 0 must be positive"},
		{[]string{"--max-pending-runs", "-5"}, nil, "--max-pending-runs -5 must be -1 (no cap), 0 (the default) or positive"},
		{[]string{"--max-resident-runs", "-2"}, nil, "--max-resident-runs -2 must be -1 (no cap), 0 (the default) or positive"},
	} {
		for _, kv := range c.env {
			k, v, _ := strings.Cut(kv, "=")
			t.Setenv(k, v)
		}
		var stdout, stderr strings.Builder
		code := Main(append([]string{"server", "--db", db}, c.args...), &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%q %q: exit %d, %q; want a usage error %q", c.args, c.env, code, stderr.String(), c.want)
		}
		for _, kv := range c.env {
			k, _, _ := strings.Cut(kv, "=")
			t.Setenv(k, "")
		}
	}
	var stdout, stderr strings.Builder
	if code := Main([]string{"server", "-h"}, &stdout, &stderr); code != exitOK ||
		!strings.Contains(stdout.String(), "-max-body") || !strings.Contains(stdout.String(), "-max-conns") ||
		!strings.Contains(stdout.String(), "-read-timeout") || !strings.Contains(stdout.String(), "-write-timeout") {
		t.Errorf("server -h: %d %s", code, stdout.String())
	}
}

// TestServerLongPollOutlivesReadTimeout: a long-poll waits its whole wait
// though the read timeout is shorter: the timeout bounds reading a
// request, not answering it.
func TestServerLongPollOutlivesReadTimeout(t *testing.T) {
	t.Parallel()
	p := runServer(t, "--db", filepath.Join(t.TempDir(), "reprise.db"), "--read-timeout", "1s", "--read-header-timeout", "1s")
	c := newClient(t, p.url)
	ctx := t.Context()
	if err := c.RegisterStep(ctx, httpapi.Step{Name: "idle", Kind: httpapi.KindPull}); err != nil {
		t.Fatal(err)
	}
	const wait = 2500 * time.Millisecond
	start := time.Now()
	tasks, err := c.Claim(ctx, httpapi.ClaimParams{Worker: "w", Steps: []string{"idle"}, Wait: wait})
	if took := time.Since(start); err != nil || len(tasks) != 0 || took < wait {
		t.Errorf("claim with wait %v: %v %+v after %v", wait, err, tasks, took)
	}
	if _, _, err := c.StartStep(ctx, "idle", nil, "r1"); err != nil {
		t.Fatal(err)
	}
	// Once its step is scheduled, the run has nothing more to record
	// until a worker claims the step.
	var last int64
	for deadline := time.Now().Add(30 * time.Second); ; {
		events, err := c.History(ctx, "r1")
		if err != nil {
			t.Fatal(err)
		}
		if len(eventsOf(events, store.EventStepScheduled)) > 0 {
			last = events[len(events)-1].Seq
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run r1 scheduled no step: %+v", events)
		}
		if _, err := c.WaitRun(ctx, "r1", time.Second); err != nil { // until its history grows
			t.Fatal(err)
		}
	}
	start = time.Now()
	resp, err := http.Get(fmt.Sprintf("%s/v1/runs/r1/history?after=%d&wait=%v", p.url, last, wait))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); resp.StatusCode != http.StatusOK || took < wait {
		t.Errorf("history with wait %v: %d %s after %v", wait, resp.StatusCode, body, took)
	}
}
