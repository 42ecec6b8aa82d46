package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"reprise"
	"reprise/clock"
	"reprise/internal/browsertest"
	"reprise/sqlite"
	"reprise/store"
	"reprise/webui"
)

// TestBrowserDemoRun shows the demo's own run in a browser: `reprise demo`
// runs its order workflow into a SQLite file, which the web page then
// serves, with two more orders held in their first backoff by a clock
// that does not move. Signed in, the list filtered to retrying shows the
// two and not the demo's; the demo's run shows each attempt with its
// error, the delay and the rule of each retry; one held order is
// cancelled from its page, and forged cancels of the other are refused.
func TestBrowserDemoRun(t *testing.T) {
	t.Parallel()
	const token = "demo-browser-token-0123456789"
	db := filepath.Join(t.TempDir(), "demo.db")
	var stdout, stderr bytes.Buffer
	if code := demoMain([]string{"--db", db}, &stdout, &stderr); code != exitOK {
		t.Fatalf("reprise demo: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}

	ctx := t.Context()
	fake := clock.NewFake(time.Now())
	st, err := sqlite.Open(ctx, db, &sqlite.Options{Now: fake.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	runs, err := st.RunList(ctx, &store.RunListParams{})
	if err != nil || len(runs) != 1 || runs[0].Status != store.RunCompleted {
		t.Fatalf("the demo's database holds %v (%v), want its one completed run", runs, err)
	}
	demoRun := runs[0].ID
	e, err := reprise.New(reprise.Config{Store: st, Clock: fake})
	if err == nil {
		err = e.Register(demoDefinitions()...)
	}
	if err != nil {
		t.Fatal(err)
	}
	engineCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- e.Run(engineCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("engine: %v", err)
		}
	})
	// Two orders whose reservation fails at once: their retries are due
	// 200 ms after, by a clock that stays where it is.
	for _, id := range []string{"held-1", "held-2"} {
		in := json.RawMessage(`{"id":"` + id + `","item":"mug","amount_cents":900,"address":"x"}`)
		if _, _, err := e.StartRun(ctx, "order", in, reprise.WithRunID(id)); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"held-1", "held-2"} {
		waitHistory(t, e, id, func(ev reprise.Event) bool { return ev.Type == store.EventAttemptFailed && !ev.RetryAt.IsZero() })
	}
	ui, err := webui.New(webui.Config{Engine: e, Store: st, Tokens: []string{token}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(ui)
	t.Cleanup(func() { hs.CloseClientConnections(); hs.Close() })

	b := browsertest.New(t, 1200, 1400)
	browsertest.SignIn(b, t, hs.URL, token)
	list := func() string { return browsertest.Text(b, t, "table.runs tbody") }
	if got := list(); !strings.Contains(got, demoRun) || !strings.Contains(got, "held-1") {
		t.Errorf("the list:\n%s", got)
	}
	browsertest.Step(b, t, "choose retrying", chromedp.SetValue(chromedp.ID("f-status"), "retrying"))
	browsertest.Navigate(b, t, "filter", chromedp.Click(chromedp.CSS(`form.filters button`)))
	if got := list(); !strings.Contains(got, "held-1") || !strings.Contains(got, "held-2") || strings.Contains(got, demoRun) ||
		!strings.Contains(got, "attempt 2 of inventory.reserve") {
		t.Errorf("the list of retrying runs:\n%s", got)
	}

	// The demo's run: every attempt of its steps, each failure's error,
	// and the delay and the rule of each retry.
	browsertest.Navigate(b, t, "list every run", chromedp.Navigate(hs.URL+"/"))
	browsertest.Navigate(b, t, "open the demo's run", chromedp.Click(chromedp.CSS(`a[href="/runs/`+demoRun+`"]`)))
	tl := browsertest.Text(b, t, "section.timeline")
	for _, want := range []string{
		"inventory.reserve", "Attempt 1", "Attempt 2", "Attempt 3",
		"NetworkError POST inventory/reserve: connection reset by peer",
		"retry after 200ms", "retry after 400ms", "by rule [retry: 4, backoff: 200ms, max_backoff: 2s]",
		"payments.charge", "Timeout attempt 1 exceeded its 500ms timeout", "retry after 100ms", "by rule [retry: 2, backoff: 100ms, backoff_kind: fixed]",
		"shipping.create", "AddressInvalid", "payments.refund", "inventory.release",
	} {
		if !strings.Contains(tl, want) {
			t.Errorf("the demo run's timeline lacks %q:\n%s", want, tl)
		}
	}
	attempts, err := chromedp.Run(b, chromedp.Evaluate[int](`document.querySelectorAll('li.attempt').length`))
	if err != nil || attempts != 8 { // reserve 3, charge 2, ship, refund, release 1 each
		t.Errorf("%d attempts on the timeline (%v), want 8", attempts, err)
	}
	browsertest.Screenshot(b, t, "demo-run-page.png")

	// A held order cancelled from its page; forged cancels of the other
	// are refused.
	browsertest.Cancel(b, t, hs.URL, "held-2")
	if run, err := e.GetRun(ctx, "held-2"); err != nil || run.Status != store.RunCancelled {
		t.Errorf("held-2: %+v %v, want cancelled", run, err)
	}
	browsertest.RequireForgedCancelsRefused(b, t, hs.URL, "held-1")
	if run, err := e.GetRun(ctx, "held-1"); err != nil || run.Status.Final() {
		t.Errorf("held-1: %+v %v, want it still running", run, err)
	}
}

// waitHistory waits until run id's history has an event ok accepts.
func waitHistory(t *testing.T, e *reprise.Engine, id string, ok func(reprise.Event) bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		events, err := e.History(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range events {
			if ok(ev) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s: no such event in 20s: %+v", id, events)
		}
	}
}
