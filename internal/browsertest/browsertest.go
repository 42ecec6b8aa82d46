// Package browsertest drives reprise's web page in a headless chromium,
// for the tests of package webui and of the reprise command.
package browsertest

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

// New starts a headless chromium for the test, with a window of width by
// height, and returns the context its actions run in.
func New(t *testing.T, width, height int) context.Context {
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

// Step runs browser actions with a timeout, failing the test with what
// they were for.
func Step(ctx context.Context, t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Navigate runs actions that load a page, waits for it, and returns its
// status.
func Navigate(ctx context.Context, t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, actions...)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return resp.Status
}

// Text returns the text of the first element css selects.
func Text(ctx context.Context, t *testing.T, css string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(css)))
	if err != nil {
		t.Fatalf("text of %s: %v", css, err)
	}
	return s
}

// SignIn opens the page at base, which asks for a token: a wrong one is
// refused with a reason, token opens the runs list.
func SignIn(ctx context.Context, t *testing.T, base, token string) {
	t.Helper()
	Navigate(ctx, t, "open the page", chromedp.Navigate(base+"/"))
	if h := Text(ctx, t, "h1"); h != "Sign in" {
		t.Fatalf("the page opened on %q, want the login form", h)
	}
	Step(ctx, t, "type a wrong token", chromedp.SendKeys(chromedp.ID("token"), "not-the-token-0123456789"))
	if status := Navigate(ctx, t, "sign in with it", chromedp.Click(chromedp.CSS(`form.login button`))); status != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d, want 401", status)
	}
	if msg := Text(ctx, t, "#login-error"); !strings.Contains(msg, "not one of the server's tokens") {
		t.Errorf("the login says %q", msg)
	}
	Step(ctx, t, "type the token", chromedp.SendKeys(chromedp.ID("token"), token))
	Navigate(ctx, t, "sign in", chromedp.Click(chromedp.CSS(`form.login button`)))
	if h := Text(ctx, t, "h1"); h != "Runs" {
		t.Fatalf("after the login the page is %q, want the runs list", h)
	}
}

// Cancel cancels run id from its page, through its confirmation, and
// checks what the page says then.
func Cancel(ctx context.Context, t *testing.T, base, id string) {
	t.Helper()
	Navigate(ctx, t, "open "+id, chromedp.Navigate(base+"/runs/"+id))
	Navigate(ctx, t, "ask to cancel", chromedp.Click(chromedp.CSS(`a[href="/runs/`+id+`/cancel"]`)))
	Step(ctx, t, "give a reason", chromedp.SendKeys(chromedp.ID("reason"), "from the browser test"))
	Navigate(ctx, t, "confirm", chromedp.Click(chromedp.CSS(`form.confirm button`)))
	if s := Text(ctx, t, "#run-status"); s != "cancelled" {
		t.Errorf("after the cancel the page says %q", s)
	}
	if n := Text(ctx, t, ".notice"); n != "The run was cancelled." {
		t.Errorf("the notice says %q", n)
	}
}

// RequireForgedCancelsRefused posts a cancel of run id, signed in, from
// the page without its CSRF token, and from a form of another origin (a
// port is another origin, not another site): both must be refused. The
// caller checks that the run still runs.
func RequireForgedCancelsRefused(ctx context.Context, t *testing.T, base, id string) {
	t.Helper()
	status, err := chromedp.Run(ctx, chromedp.Evaluate[int](
		`fetch('/runs/`+id+`/cancel', {method: 'POST', body: new URLSearchParams({reason: 'no token'})}).then(r => r.status)`,
		chromedp.EvalAwaitPromise))
	if err != nil || status != http.StatusForbidden {
		t.Errorf("a POST without the CSRF token: %d %v, want 403", status, err)
	}
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<form id="f" method="post" action="%s/runs/%s/cancel"><input name="reason" value="evil"></form>
<script>document.getElementById('f').submit()</script>`, base, id)
	}))
	defer evil.Close()
	if status := Navigate(ctx, t, "open a page of another origin", chromedp.Navigate(evil.URL),
		chromedp.WaitVisible(chromedp.CSS("main h1"))); status == http.StatusSeeOther {
		t.Errorf("the other origin's form was followed by a redirect")
	}
	if h := Text(ctx, t, "main h1"); h != "Refused" {
		t.Errorf("the other origin's form landed on %q, want Refused", h)
	}
}

// Screenshot saves a screenshot of the whole page in the test's artifact
// directory, as name (go test -artifacts keeps it).
func Screenshot(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(t.ArtifactDir(), name)
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (go test -artifacts keeps it)", path)
}
