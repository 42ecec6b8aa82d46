package cli

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"reprise/httpapi"
	"reprise/httpstep"
	"reprise/store"
)

// TestRunsFiltersOnAServer: reprise runs lists, through a real server, the
// runs its filters name: retrying ones, by step, by error type, by when
// they were created.
func TestRunsFiltersOnAServer(t *testing.T) {
	t.Parallel()
	url := startServer(t)
	c := newClient(t, url)
	ctx := t.Context()
	for _, name := range []string{"charge", "ship"} {
		if err := c.RegisterStep(ctx, httpapi.Step{Name: name, Kind: httpapi.KindPull, Policy: "[retry: 3, backoff: 1h]"}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.StartStep(ctx, name, json.RawMessage(`1`), "run-"+name); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(step string) httpapi.Task {
		t.Helper()
		tasks, err := c.Claim(ctx, httpapi.ClaimParams{Worker: "test", Steps: []string{step}, Wait: 10 * time.Second})
		if err != nil || len(tasks) != 1 {
			t.Fatalf("claim %s: %v, %v", step, tasks, err)
		}
		return tasks[0]
	}
	// charge fails and waits an hour for its retry; ship completes.
	task, retryable := claim("charge"), true
	if err := c.Fail(ctx, task.ID, task.Token, httpstep.Report{Type: "CardDeclined", Retryable: &retryable}); err != nil {
		t.Fatal(err)
	}
	task = claim("ship")
	if err := c.Complete(ctx, task.ID, task.Token, json.RawMessage(`2`)); err != nil {
		t.Fatal(err)
	}
	waitRun(t, c, "run-ship")

	list := func(args ...string) []string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := Main(append([]string{"runs", "--server", url, "--json"}, args...), &stdout, &stderr); code != exitOK {
			t.Fatalf("reprise runs %s: exit %d: %s", strings.Join(args, " "), code, stderr.String())
		}
		var runs []store.Run
		if err := json.Unmarshal(stdout.Bytes(), &runs); err != nil {
			t.Fatalf("reprise runs %s: %v: %s", strings.Join(args, " "), err, stdout.String())
		}
		var ids []string
		for _, r := range runs {
			ids = append(ids, r.ID)
		}
		slices.Sort(ids)
		return ids
	}
	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"run-charge", "run-ship"}},
		{[]string{"--status", "retrying"}, []string{"run-charge"}},
		{[]string{"--status", "completed"}, []string{"run-ship"}},
		{[]string{"--step", "charge"}, []string{"run-charge"}},
		{[]string{"--step", "ship"}, nil},
		{[]string{"--error-type", "CardDeclined"}, []string{"run-charge"}},
		{[]string{"--error-type", "HTTP503"}, nil},
		{[]string{"--since", "1h"}, []string{"run-charge", "run-ship"}},
		{[]string{"--until", "1h"}, nil},
		{[]string{"--since", later}, nil},
		{[]string{"--until", later, "--status", "retrying", "--step", "charge"}, []string{"run-charge"}},
	} {
		if got := list(tc.args...); !slices.Equal(got, tc.want) {
			t.Errorf("reprise runs %s: %q, want %q", strings.Join(tc.args, " "), got, tc.want)
		}
	}
}

// TestRunsBadFilters: a bad filter is a usage error that names its flag,
// and nothing is asked of the server.
func TestRunsBadFilters(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		http.Error(w, "no", http.StatusTeapot)
	}))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--status", "stuck"}, `--status: status "stuck" is not one of pending, running, retrying,`},
		{[]string{"--since", "yesterday"}, `--since: since "yesterday" is neither a duration`},
		{[]string{"--until", "2026-13-01"}, `--until: until "2026-13-01" is neither a duration`},
		{[]string{"--since", "1h", "--until", "2h"}, "--until: until ("},
		{[]string{"--step", strings.Repeat("s", 201)}, "--step: step is 201 characters long"},
		{[]string{"--error-type", strings.Repeat("e", 201)}, "--error-type: error_type is 201 characters long"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(append([]string{"runs", "--server", srv.URL}, tc.args...), &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("reprise runs %.60s: exit %d, stderr %q; want exit %d and %q",
				strings.Join(tc.args, " "), code, stderr.String(), exitUsage, tc.want)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("the server got %d requests for bad filters", n)
	}
}
