package webui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"reprise/store"
)

// chromiumPath finds Debian's chromium ($REPRISE_CHROMIUM names another).
// Without it the browser tests skip, unless REPRISE_BROWSER_TESTS or CI
// is set: then they fail, so that they cannot silently vanish there.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("REPRISE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("REPRISE_BROWSER_TESTS") != "" || os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed, and REPRISE_BROWSER_TESTS or CI asks for the browser tests: apt-get install -y chromium")
	}
	t.Skip("chromium is not installed (apt-get install -y chromium); REPRISE_BROWSER_TESTS=1 makes this a failure")
	return ""
}

// newBrowser starts a headless chromium for the test, with a window of
// width by height.
func newBrowser(t *testing.T, width, height int) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox, // the tests run as root in CI
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, height),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(t.Context(), opts...)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	// The first action starts the browser, which lives as long as the
	// context it was given: ctx, not one with a timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// step runs browser actions with a timeout, failing the test with what
// they were for.
func step(ctx context.Context, t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// navigate runs actions that load a page, and waits for it.
func navigate(ctx context.Context, t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, actions...)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return resp.Status
}

// text returns the text of the first element css selects.
func text(ctx context.Context, t *testing.T, css string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(css)))
	if err != nil {
		t.Fatalf("text of %s: %v", css, err)
	}
	return s
}

// TestBrowser drives the page in a real browser: the login, the runs
// list and its filters, a run whose step failed twice then succeeded
// (its screenshot is saved in the test's artifact directory), a page that
// follows its run live, a cancel from the page, and the refusals of a
// POST without the CSRF token and of one from another origin.
func TestBrowser(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testToken)
	f.start(t, "flaky", "flaky-1")
	f.start(t, "slow", "slow-1")
	f.start(t, "waiter", "waiter-1")
	f.start(t, "waiter", "waiter-2")
	f.start(t, "waiter", "waiter-3")
	f.waitFor(t, "flaky-1", "RunCompleted", has(store.EventRunCompleted))
	f.waitRetrying(t, "slow-1")
	ctx := newBrowser(t, 1200, 1000)

	// The login: a wrong token is refused, the right one opens the list.
	navigate(ctx, t, "open the page", chromedp.Navigate(f.url+"/"))
	if h := text(ctx, t, "h1"); h != "Sign in" {
		t.Fatalf("the page opened on %q, want the login form", h)
	}
	step(ctx, t, "type a wrong token", chromedp.SendKeys(chromedp.ID("token"), "not-the-token-0123456789"))
	if status := navigate(ctx, t, "sign in with it", chromedp.Click(chromedp.CSS(`form.login button`))); status != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d, want 401", status)
	}
	if msg := text(ctx, t, "#login-error"); !strings.Contains(msg, "not one of the server's tokens") {
		t.Errorf("the login says %q", msg)
	}
	step(ctx, t, "type the token", chromedp.SendKeys(chromedp.ID("token"), testToken))
	navigate(ctx, t, "sign in", chromedp.Click(chromedp.CSS(`form.login button`)))
	if h := text(ctx, t, "h1"); h != "Runs" {
		t.Fatalf("after the login the page is %q, want the runs list", h)
	}

	// The list, filtered: retrying, then a workflow.
	list := func() string { return text(ctx, t, "table.runs tbody") }
	if got := list(); !strings.Contains(got, "flaky-1") || !strings.Contains(got, "slow-1") {
		t.Errorf("the list:\n%s", got)
	}
	step(ctx, t, "choose retrying", chromedp.SetValue(chromedp.ID("f-status"), "retrying"))
	navigate(ctx, t, "filter", chromedp.Click(chromedp.CSS(`form.filters button`)))
	if got := list(); !strings.Contains(got, "slow-1") || strings.Contains(got, "flaky-1") || strings.Contains(got, "waiter-1") ||
		!strings.Contains(got, "attempt 2 of slow.call") {
		t.Errorf("the list of retrying runs:\n%s", got)
	}
	step(ctx, t, "choose any status and workflow flaky",
		chromedp.SetValue(chromedp.ID("f-status"), ""), chromedp.SendKeys(chromedp.ID("f-workflow"), "flaky"))
	navigate(ctx, t, "filter", chromedp.Click(chromedp.CSS(`form.filters button`)))
	if got := list(); !strings.Contains(got, "flaky-1") || strings.Contains(got, "slow-1") {
		t.Errorf("the list of workflow flaky:\n%s", got)
	}

	// The run: each attempt, its error, the delay and the rule of each
	// retry.
	navigate(ctx, t, "open flaky-1", chromedp.Click(chromedp.CSS(`a[href="/runs/flaky-1"]`)))
	tl := text(ctx, t, "section.timeline")
	for _, want := range []string{
		"Attempt 1", "Attempt 2", "Attempt 3", "NetworkError connection reset by peer",
		"retry after 50ms", "retry after 100ms", "by rule [retry: 3, backoff: 50ms]", "completed on attempt 3",
	} {
		if !strings.Contains(tl, want) {
			t.Errorf("the timeline lacks %q:\n%s", want, tl)
		}
	}
	bars, err := chromedp.Run(ctx, chromedp.Evaluate[[]int](`[
		document.querySelectorAll('li.attempt').length,
		document.querySelectorAll('svg.track rect.a-error').length,
		document.querySelectorAll('svg.track rect.a-ok').length,
		document.querySelectorAll('svg.track line.gap').length]`))
	if err != nil || fmt.Sprint(bars) != "[3 2 1 2]" {
		t.Errorf("attempts, failed bars, good bars, gaps: %v %v; want [3 2 1 2]", bars, err)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(t.ArtifactDir(), "run-page.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("the run page's screenshot: %s (go test -artifacts keeps it)", path)

	// A retrying run counts down to its next attempt.
	navigate(ctx, t, "open slow-1", chromedp.Navigate(f.url+"/runs/slow-1"))
	if next := text(ctx, t, "#next-attempt"); !strings.Contains(next, "Waiting for attempt 2 of slow.call") || !strings.Contains(next, "in 59m") {
		t.Errorf("the retrying run says %q", next)
	}

	// Live: the page of a waiting run shows its end when a signal ends it.
	navigate(ctx, t, "open waiter-2", chromedp.Navigate(f.url+"/runs/waiter-2"))
	if err := f.e.SignalRun(t.Context(), "waiter-2", "go", "now"); err != nil {
		t.Fatal(err)
	}
	step(ctx, t, "wait for the page to show the run completed",
		chromedp.Poll[chromedp.Void](`document.getElementById('run-status').textContent === 'completed' &&
			document.querySelector('li.k-signal h4').textContent.includes('go')`, chromedp.WithPollingTimeout(20*time.Second)))

	// Cancel from the page, through its confirmation.
	navigate(ctx, t, "open waiter-1", chromedp.Navigate(f.url+"/runs/waiter-1"))
	navigate(ctx, t, "ask to cancel", chromedp.Click(chromedp.CSS(`a[href="/runs/waiter-1/cancel"]`)))
	step(ctx, t, "give a reason", chromedp.SendKeys(chromedp.ID("reason"), "from the browser test"))
	navigate(ctx, t, "confirm", chromedp.Click(chromedp.CSS(`form.confirm button`)))
	if s := text(ctx, t, "#run-status"); s != "cancelled" {
		t.Errorf("after the cancel the page says %q", s)
	}
	if n := text(ctx, t, ".notice"); n != "The run was cancelled." {
		t.Errorf("the notice says %q", n)
	}
	if run, err := f.e.GetRun(t.Context(), "waiter-1"); err != nil || run.Status != store.RunCancelled {
		t.Errorf("waiter-1: %+v %v, want cancelled", run, err)
	}

	// A POST from the page without the CSRF token is refused.
	status, err := chromedp.Run(ctx, chromedp.Evaluate[int](
		`fetch('/runs/waiter-3/cancel', {method: 'POST', body: new URLSearchParams({reason: 'no token'})}).then(r => r.status)`,
		chromedp.EvalAwaitPromise))
	if err != nil || status != http.StatusForbidden {
		t.Errorf("a POST without the CSRF token: %d %v, want 403", status, err)
	}
	// So is a form of another origin that posts to the server, even with
	// the session's cookie (a port is another origin, not another site).
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<form id="f" method="post" action="%s/runs/waiter-3/cancel"><input name="reason" value="evil"></form>
<script>document.getElementById('f').submit()</script>`, f.url)
	}))
	defer evil.Close()
	if status := navigate(ctx, t, "open a page of another origin", chromedp.Navigate(evil.URL),
		chromedp.WaitVisible(chromedp.CSS("main h1"))); status == http.StatusSeeOther {
		t.Errorf("the other origin's form was followed by a redirect")
	}
	if h := text(ctx, t, "main h1"); h != "Refused" {
		t.Errorf("the other origin's form landed on %q, want Refused", h)
	}
	if run, err := f.e.GetRun(t.Context(), "waiter-3"); err != nil || run.Status.Final() {
		t.Errorf("waiter-3: %+v %v, want it still running", run, err)
	}
}

// On a phone's width the list is readable: no sideways scrolling.
func TestBrowserPhone(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	f.start(t, "flaky", "flaky-1")
	f.waitFor(t, "flaky-1", "RunCompleted", has(store.EventRunCompleted))
	ctx := newBrowser(t, 390, 844)
	for _, path := range []string{"/", "/runs/flaky-1"} {
		navigate(ctx, t, "open "+path, chromedp.Navigate(f.url+path))
		wide, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth + 1`))
		if err != nil || wide {
			t.Errorf("%s is wider than a phone's screen (%v)", path, err)
		}
	}
}
