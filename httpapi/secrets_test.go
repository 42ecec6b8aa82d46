package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"reprise"
	"reprise/store"
)

// secretLink is a URL with credentials: a password in its user
// information and a token in its query.
const secretLink = "https://shop:s3cretpw@hooks.example/cb?token=abc123tok"

// shownLink is secretLink as answers show it.
const shownLink = "https://xxxxx@hooks.example/cb?token=xxxxx"

// The Go workflow of TestGoRunShownWithoutSecrets takes a URL with
// credentials and puts it everywhere a run keeps something: a step's
// input, an attempt's error, a step's output, a child run's input and
// error, a signal's payload and the run's output.
type linkInput struct {
	URL string `json:"url"`
}

var (
	linkStep = reprise.NewStep("link.call", func(ctx context.Context, link string) (string, error) {
		if info, _ := reprise.StepInfoFrom(ctx); info.Attempt == 1 {
			return "", fmt.Errorf("post %s: connection refused", link)
		}
		return "called " + link, nil
	}, reprise.WithPolicyText("[retry: 3, backoff: 10ms]"))
	linkChild = reprise.NewWorkflow("link-child", func(ctx context.Context, link string) (string, error) {
		return "", fmt.Errorf("refused %s", link)
	})
	linkWorkflow = reprise.NewWorkflow("link", func(ctx context.Context, in linkInput) (map[string]string, error) {
		called, err := reprise.Step(ctx, linkStep, in.URL)
		if err != nil {
			return nil, err
		}
		_, childErr := reprise.Child(ctx, linkChild, in.URL).Get(ctx)
		approved, err := reprise.WaitSignal[string](ctx, "approve").Get(ctx)
		if err != nil {
			return nil, err
		}
		return map[string]string{"called": called, "child": fmt.Sprint(childErr), "approved": approved}, nil
	})
)

// TestGoRunShownWithoutSecrets: a Go workflow's run whose input holds a
// URL with credentials keeps them (its step gets the URL as it is), and
// no answer about the run or its child shows them: the start's, the
// run's and its long-poll's, the list's, the history's and its
// long-poll's, the child's.
func TestGoRunShownWithoutSecrets(t *testing.T) {
	t.Parallel()
	for _, kind := range testStores() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newTestServerOn(t, kind, Options{}, linkStep, linkChild, linkWorkflow)
			ctx := t.Context()
			status, started := s.call(t, "POST", "/v1/runs", `{"workflow": "link", "id": "link-1", "input": {"url": "`+secretLink+`"}}`)
			if status != http.StatusCreated {
				t.Fatalf("start: %d %s", status, started)
			}
			answers := map[string][]byte{"the start's answer": started}
			// The run waits for the signal once its child has failed.
			waitForEvent(t, s, "link-1", store.EventChildFailed)
			if err := s.c.SignalRun(ctx, "link-1", "approve", json.RawMessage(`"`+secretLink+`"`)); err != nil {
				t.Fatal(err)
			}
			run := s.waitRun(t, "link-1")
			if run.Status != store.RunCompleted {
				t.Fatalf("run link-1 %s: %+v", run.Status, run.Error)
			}
			// The engine keeps the run as it is: the step got the URL.
			kept, err := s.e.GetRun(ctx, "link-1")
			if err != nil || !strings.Contains(string(kept.Output), `"called `+secretLink+`"`) {
				t.Fatalf("the run as the engine keeps it: %v, %s; want its output with the URL as it is", err, kept.Output)
			}
			for _, path := range []string{"/v1/runs/link-1", "/v1/runs/link-1?wait=5s&after=1", "/v1/runs", "/v1/runs?workflow=link-child",
				"/v1/runs/link-1/history", "/v1/runs/link-1/history?wait=5s&after=3",
				"/v1/runs/link-1%2F2", "/v1/runs/link-1/2", "/v1/runs/link-1/2/history"} {
				status, body := s.call(t, "GET", path, "")
				if status != http.StatusOK {
					t.Errorf("GET %s: %d %s", path, status, body)
				}
				answers["GET "+path] = body
			}
			for what, body := range answers {
				if strings.Contains(string(body), "s3cretpw") || strings.Contains(string(body), "abc123tok") ||
					!strings.Contains(string(body), shownLink) || !json.Valid(body) {
					t.Errorf("%s shows the secrets, or not the URL as %s:\n%s", what, shownLink, body)
				}
			}
			var hist historyJSON
			if err := json.Unmarshal(answers["GET /v1/runs/link-1/history"], &hist); err != nil {
				t.Fatal(err)
			}
			shown := map[store.EventType]bool{}
			for _, ev := range hist.Events {
				if strings.Contains(string(ev.Input), shownLink) || strings.Contains(string(ev.Output), shownLink) ||
					ev.Error != nil && strings.Contains(ev.Error.Message, shownLink) {
					shown[ev.Type] = true
				}
			}
			for _, typ := range []store.EventType{store.EventRunStarted, store.EventStepScheduled, store.EventAttemptFailed,
				store.EventStepCompleted, store.EventChildStarted, store.EventChildFailed, store.EventSignalReceived, store.EventRunCompleted} {
				if !shown[typ] {
					t.Errorf("no %s event shows the URL as %s: %+v", typ, shownLink, hist.Events)
				}
			}
		})
	}
}

// waitForEvent waits for run id to have an event of typ.
func waitForEvent(t *testing.T, s *testServer, id string, typ store.EventType) {
	t.Helper()
	var after int64
	for {
		events, err := s.c.WaitHistory(t.Context(), id, after, 5*time.Second)
		if err != nil {
			t.Fatalf("history of %s: %v", id, err)
		}
		for _, e := range events {
			if e.Type == typ {
				return
			}
			after = e.Seq
		}
	}
}

// TestProblemsShowNoSecrets: an answer that refuses a URL quotes it
// without its credentials.
func TestProblemsShowNoSecrets(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Options{})
	for _, c := range []struct{ path, body string }{
		{"/v1/steps", `{"name": "charge", "kind": "http", "url": "http://shop:s3cretpw@127.0.0.1:1/%zz?token=abc123tok"}`},
		{"/v1/steps", `{"name": "charge", "kind": "http", "url": "ftp://shop:s3cretpw@127.0.0.1:1/x?token=abc123tok"}`},
		{"/v1/flows", `{"flow": "pay", "steps": {"charge": {"http": "http://shop:s3cretpw@127.0.0.1:1/%zz?token=abc123tok"}}}`},
	} {
		status, body := s.call(t, "POST", c.path, c.body)
		if status != http.StatusBadRequest || strings.Contains(string(body), "s3cretpw") || strings.Contains(string(body), "abc123tok") ||
			!strings.Contains(string(body), "xxxxx@") {
			t.Errorf("POST %s %s: %d %s; want 400 quoting the URL without its credentials", c.path, c.body, status, body)
		}
	}
}
