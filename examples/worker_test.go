// Package examples holds workers in other languages, and the tests that
// run them against the API.
package examples

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"reprise"
	"reprise/httpapi"
	"reprise/sqlite"
)

// TestPythonWorker runs worker.py against the API: it registers its step,
// fails the first attempt, and completes the retry.
func TestPythonWorker(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed; the Python worker example cannot run")
	}
	store, err := sqlite.Open(filepath.Join(t.TempDir(), "reprise.db"), &sqlite.Options{Synchronous: "OFF"})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	e, err := reprise.New(reprise.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.NewHandler(e, httpapi.Options{Token: "t0ken"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() { cancel(); <-done }()
	srv := httptest.NewServer(h)
	defer srv.Close()
	c, err := httpapi.NewClient(srv.URL, "t0ken")
	if err != nil {
		t.Fatal(err)
	}

	cmdCtx, stop := context.WithTimeout(t.Context(), time.Minute)
	defer stop()
	cmd := exec.CommandContext(cmdCtx, python, "worker.py", "--server", srv.URL, "--token", "t0ken",
		"--step", "text.upper", "--max-tasks", "2", "--wait", "2s")
	outc := make(chan []byte, 1)
	go func() {
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("worker.py: %v\n%s", err, out)
		}
		outc <- out
	}()
	// The worker registers its step first; start the run once it has.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, _, err := c.StartStep(t.Context(), "text.upper", json.RawMessage(`{"text": "hello", "fail_until_attempt": 1}`), "py-1")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("start: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	out := <-outc
	run, err := c.WaitRun(t.Context(), "py-1", 0)
	for err == nil && !run.Status.Final() {
		run, err = c.WaitRun(t.Context(), "py-1", 5*time.Second)
	}
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Upper   string `json:"upper"`
		Attempt int    `json:"attempt"`
	}
	json.Unmarshal(run.Output, &got)
	if run.Status != reprise.RunCompleted || got.Upper != "HELLO" || got.Attempt != 2 {
		t.Errorf("run %s %s\nworker said:\n%s", run.Status, run.Output, out)
	}
}
