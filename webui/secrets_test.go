package webui_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"reprise"
	"reprise/store"
)

// secretLink is a URL with credentials: a password in its user
// information and a token in its query; shownLink is how pages show it.
const (
	secretLink = "https://shop:s3cretpw@hooks.example/cb?token=abc123tok"
	shownLink  = "https://xxxxx@hooks.example/cb?token=xxxxx"
)

// linkWorkflow calls linkStep with its input, a URL, whose first attempt
// fails with an error that quotes it, then fails with an error that
// quotes the step's output.
var (
	linkStep = reprise.NewStep("link.call", func(ctx context.Context, link string) (string, error) {
		if info, _ := reprise.StepInfoFrom(ctx); info.Attempt == 1 {
			return "", fmt.Errorf("post %s: connection refused", link)
		}
		return "called " + link, nil
	}, reprise.WithPolicyText("[retry: 3, backoff: 10ms]"))
	linkWorkflow = reprise.NewWorkflow("link", func(ctx context.Context, link string) (string, error) {
		called, err := reprise.Step(ctx, linkStep, link)
		if err != nil {
			return "", err
		}
		return "", fmt.Errorf("refused after %s", called)
	})
)

// TestPagesShowNoSecrets: the pages of a run whose input, step input,
// attempt error, step output and run error hold a URL with credentials
// show it without them, and the run keeps them.
func TestPagesShowNoSecrets(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	if _, _, err := f.e.StartRun(t.Context(), "link", []byte(`"`+secretLink+`"`), reprise.WithRunID("link-1")); err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, "link-1", "RunFailed", has(store.EventRunFailed))
	if run, err := f.e.GetRun(t.Context(), "link-1"); err != nil || !strings.Contains(run.Error.Message, secretLink) {
		t.Fatalf("the run as the engine keeps it: %v, %+v; want its error with the URL as it is", err, run)
	}
	c := f.client(t)
	for _, path := range []string{"/runs/link-1", "/?status=failed", "/runs/link-1/live?after=0"} {
		a := c.get(path)
		if strings.Contains(a.body, "s3cretpw") || strings.Contains(a.body, "abc123tok") {
			t.Errorf("GET %s shows the secrets: %s", path, a)
		}
	}
	page := c.get("/runs/link-1").body
	// The run's input and error, the attempt's error, the step's output.
	if n := strings.Count(page, shownLink); n < 4 {
		t.Errorf("the run's page shows the URL as %s %d times, want 4 or more:\n%s", shownLink, n, page)
	}
}
