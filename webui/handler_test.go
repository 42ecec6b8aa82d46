package webui_test

import (
	"bufio"
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"reprise"
	"reprise/store"
	"reprise/webui"
)

const testToken = "s3cret-token-0123456789abcdef"

// A server with tokens sends a reader without a session to the login
// form; a wrong token is refused and not written back; the right one
// sets a session cookie (HttpOnly, SameSite=Strict) that holds nothing of
// the token, and opens the page asked for.
func TestLogin(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testToken)
	c := f.client(t)
	if a := c.get("/runs/abc?notice=cancelled"); a.status != http.StatusSeeOther ||
		a.header.Get("Location") != "/login?next="+url.QueryEscape("/runs/abc?notice=cancelled") {
		t.Fatalf("GET a run without a session: %d, Location %q; want 303 to the login", a.status, a.header.Get("Location"))
	}
	// A link followed from another site comes without the SameSite=Strict
	// cookie: the page opens itself again, from this site.
	req, err := http.NewRequest(http.MethodGet, f.url+"/runs/abc", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	if a := c.do(req); a.status != http.StatusOK || !strings.Contains(a.body, `http-equiv="refresh" content="0; url=/runs/abc"`) {
		t.Errorf("a link from another site: %s; want a page that reopens /runs/abc", a)
	}
	wrong := c.post("/login", url.Values{"csrf": {c.csrf("/login")}, "token": {"not-the-token-at-all"}, "next": {"/"}})
	if wrong.status != http.StatusUnauthorized || !strings.Contains(wrong.body, "not one of the server") ||
		strings.Contains(wrong.body, "not-the-token-at-all") {
		t.Errorf("a wrong token: %s; want 401 that does not repeat the token", wrong)
	}
	a := c.post("/login", url.Values{"csrf": {c.csrf("/login")}, "token": {testToken}, "next": {"/runs/abc"}})
	if a.status != http.StatusSeeOther || a.header.Get("Location") != "/runs/abc" {
		t.Fatalf("login: %s, Location %q; want 303 to /runs/abc", a, a.header.Get("Location"))
	}
	var session *http.Cookie
	for _, line := range a.header.Values("Set-Cookie") {
		ck, err := http.ParseSetCookie(line)
		if err != nil {
			t.Fatal(err)
		}
		if ck.Name == "reprise_session" {
			session = ck
		}
		if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure {
			t.Errorf("cookie %s: HttpOnly %v, SameSite %v, Secure %v; want HttpOnly, Strict, not Secure over plain HTTP",
				ck.Name, ck.HttpOnly, ck.SameSite, ck.Secure)
		}
	}
	if session == nil || strings.Contains(session.Value, testToken) || session.MaxAge <= 0 {
		t.Fatalf("session cookie %+v: want one that holds nothing of the token, with a Max-Age", session)
	}
	if a := c.get("/"); a.status != http.StatusOK || !strings.Contains(a.body, "Sign out") {
		t.Errorf("GET / signed in: %d; want 200 with a sign-out button", a.status)
	}
	// An open redirect is refused: a browser reads each of these as
	// //evil.example/ (it drops tabs and newlines, and takes \ for /).
	for _, next := range []string{"//evil.example/", "/\\evil.example/", "/\t/evil.example/", "/\n/evil.example/", "/\t\\evil.example/"} {
		evil := f.client(t)
		if a := evil.post("/login", url.Values{"csrf": {evil.csrf("/login")}, "token": {testToken}, "next": {next}}); a.header.Get("Location") != "/" {
			t.Errorf("login with next %q: Location %q, want /", next, a.header.Get("Location"))
		}
		if a := c.get("/login?next=" + url.QueryEscape(next)); a.header.Get("Location") != "/" {
			t.Errorf("signed in, GET /login?next=%q: Location %q, want /", next, a.header.Get("Location"))
		}
	}
	// Behind a TLS proxy the cookies are Secure.
	tls := f.client(t)
	csrf := tls.csrf("/login")
	a = tls.post("/login", url.Values{"csrf": {csrf}, "token": {testToken}}, "X-Forwarded-Proto", "https")
	for _, line := range a.header.Values("Set-Cookie") {
		if ck, _ := http.ParseSetCookie(line); ck != nil && !ck.Secure {
			t.Errorf("cookie %s set over TLS is not Secure", ck.Name)
		}
	}
	// Signing out ends the session.
	if a := c.post("/logout", url.Values{"csrf": {c.csrf("/")}}); a.status != http.StatusSeeOther {
		t.Errorf("logout: %s", a)
	}
	if a := c.get("/"); a.status != http.StatusSeeOther {
		t.Errorf("GET / after logout: %d, want 303 to the login", a.status)
	}
	if strings.Contains(f.log.String(), testToken) {
		t.Errorf("the log holds the token:\n%s", f.log)
	}
}

// A session is signed: one made up, altered or expired is not accepted.
func TestSessionForged(t *testing.T) {
	t.Parallel()
	now := time.Now()
	clock := func() time.Time { return now }
	e := newFixture(t, testToken)
	ui, err := webui.New(webui.Config{Engine: e.e, Store: e.st, Tokens: []string{testToken}, Now: clock, SessionTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	get := func(cookie string) int {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.AddCookie(&http.Cookie{Name: "reprise_session", Value: cookie})
		rec := httptest.NewRecorder()
		ui.ServeHTTP(rec, req)
		return rec.Code
	}
	// Sign in through the handler to get a real session.
	c := e.client(t)
	a := c.login(testToken)
	var value string
	for _, line := range a.header.Values("Set-Cookie") {
		if ck, _ := http.ParseSetCookie(line); ck != nil && ck.Name == "reprise_session" {
			value = ck.Value
		}
	}
	if value == "" {
		t.Fatalf("login: %s", a)
	}
	exp, rest, _ := strings.Cut(value, ".")
	for _, forged := range []string{"", "garbage", exp + "1." + rest, "9999999999." + rest, value + "x", strings.Replace(value, ".", ".0", 1)} {
		if code := get(forged); code != http.StatusSeeOther {
			t.Errorf("session %q: %d, want 303 to the login", forged, code)
		}
	}
	// The fixture's handler made the session with the real clock; under
	// this handler's clock it is valid now and expired in 13 hours.
	if code := get(value); code != http.StatusOK {
		t.Errorf("the real session: %d, want 200", code)
	}
	now = now.Add(13 * time.Hour)
	if code := get(value); code != http.StatusSeeOther {
		t.Errorf("a session 13 hours old: %d, want 303 to the login", code)
	}
}

// Every POST needs the CSRF token of its cookie, and, on a server with
// tokens, a session; a cross-site POST is refused whatever it carries.
func TestCSRF(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testToken)
	f.start(t, "waiter", "w-1")
	c := f.client(t)
	if a := c.login(testToken); a.status != http.StatusSeeOther {
		t.Fatalf("login: %s", a)
	}
	for _, tt := range []struct {
		name    string
		form    url.Values
		headers []string
	}{
		{"no token", url.Values{"reason": {"x"}}, nil},
		{"a wrong token", url.Values{"csrf": {"AAAA"}}, nil},
		{"another browser's token", url.Values{"csrf": {f.client(t).csrf("/login")}}, nil},
		{"cross-site", url.Values{"csrf": {c.csrf("/runs/w-1")}}, []string{"Sec-Fetch-Site", "cross-site"}},
		{"another origin", url.Values{"csrf": {c.csrf("/runs/w-1")}}, []string{"Origin", "https://evil.example"}},
	} {
		if a := c.post("/runs/w-1/cancel", tt.form, tt.headers...); a.status != http.StatusForbidden {
			t.Errorf("cancel with %s: %s; want 403", tt.name, a)
		}
	}
	// Without a session, even with a CSRF token.
	anon := f.client(t)
	if a := anon.post("/runs/w-1/cancel", url.Values{"csrf": {anon.csrf("/login")}}); a.status != http.StatusUnauthorized {
		t.Errorf("cancel without a session: %s; want 401", a)
	}
	// The login form needs one too.
	if a := anon.post("/login", url.Values{"token": {testToken}}); a.status != http.StatusForbidden {
		t.Errorf("login without a CSRF token: %s; want 403", a)
	}
	if run, _ := f.e.GetRun(t.Context(), "w-1"); run.Status.Final() {
		t.Fatalf("a refused POST changed the run: %+v", run)
	}
	// With both, the action is done.
	if a := c.post("/runs/w-1/cancel", url.Values{"csrf": {c.csrf("/runs/w-1/cancel")}}); a.status != http.StatusSeeOther {
		t.Fatalf("cancel: %s", a)
	}
	if run, _ := f.e.GetRun(t.Context(), "w-1"); run.Status != store.RunCancelled {
		t.Errorf("run after cancel: %s", run.Status)
	}
}

// Without tokens there is no login, and forms still need their token.
func TestOpenServer(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	f.start(t, "waiter", "w-1")
	c := f.client(t)
	a := c.get("/")
	if a.status != http.StatusOK || strings.Contains(a.body, "Sign out") || !strings.Contains(a.body, "w-1") {
		t.Fatalf("GET /: %s", a)
	}
	if a := c.get("/login"); a.status != http.StatusSeeOther || a.header.Get("Location") != "/" {
		t.Errorf("GET /login: %d %q; want 303 to /", a.status, a.header.Get("Location"))
	}
	if a := c.post("/runs/w-1/signal", url.Values{"name": {"go"}}); a.status != http.StatusForbidden {
		t.Errorf("signal without a CSRF token: %s; want 403", a)
	}
	a = c.post("/runs/w-1/signal", url.Values{"csrf": {c.csrf("/runs/w-1/signal")}, "name": {"go"}, "payload": {`"yes"`}})
	if a.status != http.StatusSeeOther || a.header.Get("Location") != "/runs/w-1?notice=signalled" {
		t.Fatalf("signal: %s %q", a, a.header.Get("Location"))
	}
	f.waitFor(t, "w-1", "RunCompleted", has(store.EventRunCompleted))
	if a := c.get("/runs/w-1?notice=signalled"); !strings.Contains(a.body, "The signal was sent.") ||
		!strings.Contains(a.body, `signal <q>go</q> received`) {
		t.Errorf("the run's page after the signal: %s", a)
	}
}

// Pages that do not exist are 404, and bad parameters are 400 with a
// message that names the parameter and says what it takes.
func TestErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	f.start(t, "flaky", "f-1")
	c := f.client(t)
	for _, tt := range []struct {
		path   string
		status int
		want   string
	}{
		{"/nope", 404, "There is no page at /nope"},
		{"/runs/nope", 404, "There is no run &#34;nope&#34;"},
		{"/runs/nope/cancel", 404, "There is no run"},
		{"/runs/f-1/frobnicate", 400, "not a child run&#39;s place"},
		{"/runs/bad%20id", 400, "is not a run id"},
		{"/runs/f-1?x=1", 400, "Unknown parameter &#34;x&#34;"},
		{"/runs/f-1?notice=bogus", 400, "notice &#34;bogus&#34;"},
		{"/?stauts=failed", 400, "unknown parameter &#34;stauts&#34;; the list takes limit, cursor, id, status, workflow, step, error_type, since, until"},
		{"/?status=bogus", 400, "status &#34;bogus&#34; is not one of pending, running, retrying, completed, failed, cancelled"},
		{"/?status=failed&status=running", 400, "given 2 times"},
		{"/?limit=0", 400, "limit &#34;0&#34; is not a number from 1 to 200"},
		{"/?limit=abc", 400, "limit &#34;abc&#34;"},
		{"/?since=yesterday", 400, "since &#34;yesterday&#34; is neither a duration"},
		{"/?cursor=a%20b", 400, "cursor is not a run id"},
		{"/?step=" + strings.Repeat("s", 201), 400, "step is 201 characters long"},
		{"/?since=2h&until=3h", 400, "until (2"},
		{"/?%zz", 400, "malformed"},
		{"/?id=nope", 404, "There is no run with the id"},
		{"/?id=bad%20id", 400, "no run can have the id"},
		{"/runs/f-1/live?after=x", 400, "not an event"},
		{"/runs/nope/live", 404, "no run"},
	} {
		a := c.get(tt.path)
		if a.status != tt.status || !strings.Contains(a.body, tt.want) {
			t.Errorf("GET %s: %d, want %d with %q; body:\n%s", tt.path, a.status, tt.status, tt.want, a.body)
		}
		if a.status >= 400 && a.status != 404 && !strings.Contains(a.header.Get("Content-Type"), "text/") {
			t.Errorf("GET %s: Content-Type %q", tt.path, a.header.Get("Content-Type"))
		}
	}
	if a := c.post("/runs/f-1", url.Values{}); a.status != http.StatusMethodNotAllowed {
		t.Errorf("POST a run's page: %s; want 405", a)
	}
	// Search by id opens the run.
	if a := c.get("/?id=f-1"); a.status != http.StatusSeeOther || a.header.Get("Location") != "/runs/f-1" {
		t.Errorf("search f-1: %d %q", a.status, a.header.Get("Location"))
	}
	// Every page carries the headers that keep it out of frames and
	// scripts of other origins.
	a := c.get("/")
	if csp := a.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
}

// The list filters by status (retrying too), workflow and time, and pages
// with a cursor.
func TestListFilters(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	f.start(t, "slow", "slow-1")
	f.waitRetrying(t, "slow-1")
	for i := 1; i <= 3; i++ {
		id := "flaky-" + string(rune('0'+i))
		f.start(t, "flaky", id)
		f.waitFor(t, id, "RunCompleted", has(store.EventRunCompleted))
	}
	f.start(t, "waiter", "waiter-1")
	c := f.client(t)
	ids := func(body string) []string {
		var out []string
		for _, id := range []string{"slow-1", "flaky-1", "flaky-2", "flaky-3", "waiter-1"} {
			if strings.Contains(body, `href="/runs/`+id+`"`) {
				out = append(out, id)
			}
		}
		return out
	}
	for _, tt := range []struct {
		query string
		want  string
	}{
		{"", "slow-1 flaky-1 flaky-2 flaky-3 waiter-1"},
		{"?status=retrying", "slow-1"},
		{"?status=running", "slow-1 waiter-1"},
		{"?status=completed", "flaky-1 flaky-2 flaky-3"},
		{"?workflow=flaky", "flaky-1 flaky-2 flaky-3"},
		{"?workflow=flaky&status=retrying", ""},
		{"?since=1h", "slow-1 flaky-1 flaky-2 flaky-3 waiter-1"},
		{"?since=" + url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339)), ""},
		{"?until=" + url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339)), "slow-1 flaky-1 flaky-2 flaky-3 waiter-1"},
		{"?until=1h", ""},
		{"?step=slow.call", "slow-1"},
		{"?step=flaky.call", ""}, // its retries succeeded: no step fails
		{"?error_type=NetworkError&status=retrying", "slow-1"},
		{"?error_type=CardDeclined", ""},
	} {
		a := c.get("/" + tt.query)
		if got := strings.Join(ids(a.body), " "); a.status != 200 || got != tt.want {
			t.Errorf("GET /%s: %d, runs %q, want %q", tt.query, a.status, got, tt.want)
		}
	}
	// The retrying run says which attempt it waits for.
	for _, path := range []string{"/?status=retrying", "/"} {
		if a := c.get(path); !strings.Contains(a.body, "attempt 2 of slow.call") {
			t.Errorf("GET %s: the retrying run does not say what it waits for:\n%s", path, a.body)
		}
	}
	// Pages of two, newest first.
	var seen []string
	next := "/?limit=2"
	for pages := 0; next != ""; pages++ {
		if pages > 3 {
			t.Fatal("more pages than runs")
		}
		a := c.get(next)
		seen = append(seen, ids(a.body)...)
		next = ""
		if i := strings.Index(a.body, `rel="next"`); i >= 0 {
			j := strings.LastIndex(a.body[:i], `href="`)
			next = strings.ReplaceAll(a.body[j+len(`href="`):i-2], "&amp;", "&")
		}
	}
	if len(seen) != 5 {
		t.Errorf("pages of 2 listed %q, want the 5 runs once each", seen)
	}
}

// A run's page shows each attempt of a step that failed twice then
// succeeded: its error, the delay and the rule of each retry.
func TestRunPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	f.start(t, "flaky", "flaky-1")
	f.waitFor(t, "flaky-1", "RunCompleted", has(store.EventRunCompleted))
	pageHas(t, "the run's page", f.client(t).get("/runs/flaky-1").body,
		"<strong>Attempt 1</strong>", "<strong>Attempt 2</strong>", "<strong>Attempt 3</strong>",
		`<span class="etype">NetworkError</span> <span class="msg">connection reset by peer</span>`,
		`retry after <strong class="delay">50ms</strong>`, `retry after <strong class="delay">100ms</strong>`,
		`by rule <code class="rule">[retry: 3, backoff: 50ms]</code>`,
		"completed on attempt 3", `data-final="true"`,
	)
}

// A run waiting for a retry shows when, counting down, and what its
// policy decides next.
func TestRunPageRetrying(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	f.start(t, "slow", "slow-1")
	f.waitRetrying(t, "slow-1")
	pageHas(t, "the page of a retrying run", f.client(t).get("/runs/slow-1").body,
		"Waiting for attempt 2 of <strong>slow.call</strong> (the last failed with NetworkError)",
		"data-countdown>in ", "What the policy decides next",
		"If attempt 2 and each one after it fail at once with NetworkError",
		"<td>2</td>\n              <td>retry after 2h0m0s</td>", "stop: exhausted, no attempts left",
		`data-final="false"`, "Cancel run…",
	)
}

// countingEngine counts the histories the page reads, by run.
type countingEngine struct {
	webui.Engine
	mu    sync.Mutex
	reads map[string]int
}

func (e *countingEngine) History(ctx context.Context, id string) ([]reprise.Event, error) {
	e.mu.Lock()
	e.reads[id]++
	e.mu.Unlock()
	return e.Engine.History(ctx, id)
}

// The list reads the history of the retrying runs it shows, and of no
// other run, finished or running.
func TestListReadsHistoriesOfRetryingRunsOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	f.start(t, "slow", "slow-1")
	f.waitRetrying(t, "slow-1")
	f.start(t, "flaky", "flaky-1")
	f.waitFor(t, "flaky-1", "RunCompleted", has(store.EventRunCompleted))
	f.start(t, "waiter", "waiter-1")
	f.start(t, "waiter", "waiter-2")
	e := &countingEngine{Engine: f.e, reads: map[string]int{}}
	ui, err := webui.New(webui.Config{Engine: e, Store: f.st})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(ui)
	defer hs.Close()
	c := f.client(t)
	c.base = hs.URL
	for _, path := range []string{"/", "/?status=running", "/?status=retrying"} {
		if a := c.get(path); a.status != 200 || !strings.Contains(a.body, "attempt 2 of slow.call") {
			t.Errorf("GET %s: %d, the retrying run does not say what it waits for:\n%s", path, a.status, a.body)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if want := map[string]int{"slow-1": 3}; !maps.Equal(e.reads, want) {
		t.Errorf("histories read for three lists: %v, want %v", e.reads, want)
	}
}

// A run whose step no worker claims says so on its page and in the list.
func TestWaiting(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	f.start(t, "lost", "lost-1")
	deadline := time.Now().Add(20 * time.Second)
	for {
		w, err := f.e.RunWaiting(t.Context(), "lost-1")
		if err != nil {
			t.Fatal(err)
		}
		if w != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("run lost-1 is not reported waiting in 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c := f.client(t)
	pageHas(t, "the page of a waiting run", c.get("/runs/lost-1").body,
		`<span class="badge s-waiting">waiting</span>`,
		`id="waiting">Step <strong>nowhere</strong> (#1) has waited for a worker since`,
		reprise.WhyNotRegistered)
	pageHas(t, "the runs list", c.get("/").body,
		`<span class="badge s-waiting">waiting</span>`, "nowhere unclaimed since")
}

// pageHas reports each of wants that body, the page named page, lacks,
// then logs the body once if any is missing.
func pageHas(t *testing.T, page, body string, wants ...string) {
	t.Helper()
	missing := false
	for _, want := range wants {
		if !strings.Contains(body, want) {
			t.Errorf("%s lacks %q", page, want)
			missing = true
		}
	}
	if missing {
		t.Log(body)
	}
}

// Cancel, redrive and signal: each is confirmed on a page of its own, then
// done; one the run's state does not allow is refused with the reason.
func TestActions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	f.start(t, "doomed", "d-1")
	f.waitFor(t, "d-1", "RunFailed", has(store.EventRunFailed))
	f.start(t, "waiter", "w-1")
	c := f.client(t)

	if a := c.get("/runs/d-1/cancel"); a.status != 200 || !strings.Contains(a.body, "can no longer be cancelled") {
		t.Errorf("the cancel page of a failed run: %s", a)
	}
	a := c.get("/runs/d-1/redrive")
	if a.status != 200 || !strings.Contains(a.body, "Redrive the run") || !strings.Contains(a.body, "CardDeclined") {
		t.Fatalf("the redrive page: %s", a)
	}
	a = c.post("/runs/d-1/redrive", url.Values{"csrf": {c.csrf("/runs/d-1/redrive")}, "by": {"alice"}})
	if a.status != http.StatusSeeOther {
		t.Fatalf("redrive: %s", a)
	}
	f.waitFor(t, "d-1", "RunRedriven by alice", func(events []reprise.Event) bool {
		for _, ev := range events {
			if ev.Type == store.EventRunRedriven && ev.By == "alice" {
				return true
			}
		}
		return false
	})

	if a := c.get("/runs/w-1/redrive"); !strings.Contains(a.body, "Only a run that failed") {
		t.Errorf("the redrive page of a running run: %s", a)
	}
	a = c.post("/runs/w-1/signal", url.Values{"csrf": {c.csrf("/runs/w-1/signal")}, "name": {"go"}, "payload": {"{not json"}})
	if a.status != http.StatusBadRequest || !strings.Contains(a.body, "The payload is not JSON as the API takes it") || !strings.Contains(a.body, "{not json") {
		t.Errorf("a signal with a bad payload: %s; want 400 that keeps what was typed", a)
	}
	// A payload is JSON as the API takes it: no name twice, no NUL, no
	// lone surrogate; refused, it sends nothing.
	for _, payload := range []string{`{"a": 1, "a": 2}`, `{"a": "\u0000"}`, `"\ud800"`, `1 2`} {
		a = c.post("/runs/w-1/signal", url.Values{"csrf": {c.csrf("/runs/w-1/signal")}, "name": {"go"}, "payload": {payload}})
		if a.status != http.StatusBadRequest || !strings.Contains(a.body, "The payload is not JSON as the API takes it") {
			t.Errorf("a signal with payload %s: %s; want 400", payload, a)
		}
	}
	if events, err := f.e.History(t.Context(), "w-1"); err != nil || has(store.EventSignalReceived)(events) {
		t.Errorf("refused signals were sent: %v %v", events, err)
	}
	a = c.post("/runs/w-1/signal", url.Values{"csrf": {c.csrf("/runs/w-1/signal")}, "payload": {"1"}})
	if a.status != http.StatusBadRequest || !strings.Contains(a.body, "Give the signal") {
		t.Errorf("a signal without a name: %s", a)
	}
	csrf := c.csrf("/runs/w-1/cancel")
	a = c.post("/runs/w-1/cancel", url.Values{"csrf": {csrf}, "reason": {"test over"}})
	if a.status != http.StatusSeeOther || a.header.Get("Location") != "/runs/w-1?notice=cancelled" {
		t.Fatalf("cancel: %s", a)
	}
	events := f.waitFor(t, "w-1", "RunCancelled", has(store.EventRunCancelled))
	if last := events[len(events)-1]; last.Reason != "test over" {
		t.Errorf("RunCancelled reason %q, want the form's", last.Reason)
	}
	// Again: the run has finished.
	a = c.post("/runs/w-1/cancel", url.Values{"csrf": {csrf}})
	if a.status != http.StatusConflict || !strings.Contains(a.body, "already finished") {
		t.Errorf("cancel a cancelled run: %s; want 409", a)
	}
}

// The live stream of a run says when its history grows, and when it ends.
func TestLive(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testToken)
	f.start(t, "waiter", "w-1")
	c := f.client(t)
	if a := c.get("/runs/w-1/live"); a.status != http.StatusUnauthorized {
		t.Errorf("the stream without a session: %d, want 401", a.status)
	}
	c.login(testToken)
	f.waitFor(t, "w-1", "RunStarted", has(store.EventRunStarted))
	req, err := http.NewRequest(http.MethodGet, f.url+"/runs/w-1/live?after=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		if err := f.e.SignalRun(t.Context(), "w-1", "go", "now"); err != nil {
			t.Errorf("signal: %v", err)
		}
	}()
	lines := bufio.NewScanner(resp.Body)
	var got []string
	for lines.Scan() {
		if l := lines.Text(); strings.HasPrefix(l, "event: ") {
			got = append(got, strings.TrimPrefix(l, "event: "))
		}
	}
	if len(got) < 2 || got[0] != "history" || got[len(got)-1] != "end" {
		t.Errorf("events %q, want history... end", got)
	}
}

func TestNewChecksConfig(t *testing.T) {
	t.Parallel()
	_, err := webui.New(webui.Config{Tokens: []string{"has space"}, PollInterval: -1})
	for _, want := range []string{"Engine is required", "Store is required", "must not be negative", "token 1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New: %v, want it to say %q", err, want)
		}
	}
}
