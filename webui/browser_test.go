package webui_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"reprise/internal/browsertest"
	"reprise/store"
)

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
	ctx := browsertest.New(t, 1200, 1000)

	// The login: a wrong token is refused, the right one opens the list.
	browsertest.SignIn(ctx, t, f.url, testToken)

	// The list, filtered: retrying, then a workflow.
	list := func() string { return browsertest.Text(ctx, t, "table.runs tbody") }
	if got := list(); !strings.Contains(got, "flaky-1") || !strings.Contains(got, "slow-1") {
		t.Errorf("the list:\n%s", got)
	}
	browsertest.Step(ctx, t, "choose retrying", chromedp.SetValue(chromedp.ID("f-status"), "retrying"))
	browsertest.Navigate(ctx, t, "filter", chromedp.Click(chromedp.CSS(`form.filters button`)))
	if got := list(); !strings.Contains(got, "slow-1") || strings.Contains(got, "flaky-1") || strings.Contains(got, "waiter-1") ||
		!strings.Contains(got, "attempt 2 of slow.call") {
		t.Errorf("the list of retrying runs:\n%s", got)
	}
	browsertest.Navigate(ctx, t, "clear the filters", chromedp.Click(chromedp.CSS(`form.filters a[href="/"]`)))
	browsertest.Step(ctx, t, "type a failing step and an error type",
		chromedp.SendKeys(chromedp.ID("f-step"), "slow.call"), chromedp.SendKeys(chromedp.ID("f-error-type"), "NetworkError"))
	browsertest.Navigate(ctx, t, "filter", chromedp.Click(chromedp.CSS(`form.filters button`)))
	if got := list(); !strings.Contains(got, "slow-1") || strings.Contains(got, "flaky-1") || strings.Contains(got, "waiter-1") {
		t.Errorf("the list of runs failing at slow.call with NetworkError:\n%s", got)
	}

	browsertest.Navigate(ctx, t, "clear the filters", chromedp.Click(chromedp.CSS(`form.filters a[href="/"]`)))
	browsertest.Step(ctx, t, "choose any status and workflow flaky",
		chromedp.SetValue(chromedp.ID("f-status"), ""), chromedp.SendKeys(chromedp.ID("f-workflow"), "flaky"))
	browsertest.Navigate(ctx, t, "filter", chromedp.Click(chromedp.CSS(`form.filters button`)))
	if got := list(); !strings.Contains(got, "flaky-1") || strings.Contains(got, "slow-1") {
		t.Errorf("the list of workflow flaky:\n%s", got)
	}
	// The run: each attempt, its error, the delay and the rule of each
	// retry.
	browsertest.Navigate(ctx, t, "open flaky-1", chromedp.Click(chromedp.CSS(`a[href="/runs/flaky-1"]`)))
	tl := browsertest.Text(ctx, t, "section.timeline")
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
	browsertest.Screenshot(ctx, t, "run-page.png")

	// A retrying run counts down to its next attempt.
	browsertest.Navigate(ctx, t, "open slow-1", chromedp.Navigate(f.url+"/runs/slow-1"))
	if next := browsertest.Text(ctx, t, "#next-attempt"); !strings.Contains(next, "Waiting for attempt 2 of slow.call") || !strings.Contains(next, "in 59m") {
		t.Errorf("the retrying run says %q", next)
	}

	// Live: the page of a waiting run shows its end when a signal ends it.
	browsertest.Navigate(ctx, t, "open waiter-2", chromedp.Navigate(f.url+"/runs/waiter-2"))
	if err := f.e.SignalRun(t.Context(), "waiter-2", "go", "now"); err != nil {
		t.Fatal(err)
	}
	browsertest.Step(ctx, t, "wait for the page to show the run completed",
		chromedp.Poll[chromedp.Void](`document.getElementById('run-status').textContent === 'completed' &&
			document.querySelector('li.k-signal h4').textContent.includes('go')`, chromedp.WithPollingTimeout(20*time.Second)))

	// Cancel from the page, through its confirmation.
	browsertest.Cancel(ctx, t, f.url, "waiter-1")
	if run, err := f.e.GetRun(t.Context(), "waiter-1"); err != nil || run.Status != store.RunCancelled {
		t.Errorf("waiter-1: %+v %v, want cancelled", run, err)
	}

	// A POST from the page without the CSRF token is refused, and so is a
	// form of another origin that posts to the server.
	browsertest.RequireForgedCancelsRefused(ctx, t, f.url, "waiter-3")
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
	ctx := browsertest.New(t, 390, 844)
	for _, path := range []string{"/", "/runs/flaky-1"} {
		browsertest.Navigate(ctx, t, "open "+path, chromedp.Navigate(f.url+path))
		wide, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth + 1`))
		if err != nil || wide {
			t.Errorf("%s is wider than a phone's screen (%v)", path, err)
		}
	}
}
