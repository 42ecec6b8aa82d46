package otel_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"reprise"
	"reprise/otel"
	"reprise/reprisetest"
	"reprise/retry"
	"reprise/sqlite"
)

// The crash test runs a traced run in a child process (this test binary,
// re-executed), kills it with SIGKILL while an attempt runs, and finishes
// the run in this process on the same database: the spans both processes
// emitted form one trace.

// crashDefs is a workflow of one step whose first attempt fails, whose
// second hangs in the child (which is killed then), and whose third
// succeeds. hung, when set, is a file the second attempt creates, once
// the spans of what ended before it are exported (tr).
func crashDefs(hung string, tr *otel.Tracer) []reprise.Definition {
	flaky := reprise.NewStep("flaky", func(ctx context.Context, _ int) (string, error) {
		info, _ := reprise.StepInfoFrom(ctx)
		switch {
		case info.Attempt == 1:
			return "", retry.NewError("Flaky", "first try fails")
		case info.Attempt == 2 && hung != "":
			if err := tr.ForceFlush(ctx); err != nil {
				return "", err
			}
			if err := os.WriteFile(hung, nil, 0o644); err != nil {
				return "", err
			}
			<-ctx.Done() // the kill is on its way
			return "", context.Cause(ctx)
		}
		return "done", nil
	}, reprise.WithPolicyText("[retry: 5, backoff: 50ms, backoff_kind: fixed]"))
	wf := reprise.NewWorkflow("crash", func(ctx context.Context, n int) (string, error) {
		return reprise.Call[string](ctx, "flaky", n)
	})
	return []reprise.Definition{wf, flaky}
}

// fileSpan is a span as the child writes it down.
type fileSpan struct {
	Name    string `json:"name"`
	Trace   string `json:"trace"`
	Span    string `json:"span"`
	Parent  string `json:"parent"`
	Attempt int64  `json:"attempt"`
}

// fileExporter appends each span to a file as it ends, so that the spans
// of a process killed later are there.
type fileExporter struct{ path string }

func (x fileExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	f, err := os.OpenFile(x.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for _, s := range spans {
		out := fileSpan{Name: s.Name(), Trace: s.SpanContext().TraceID().String(), Span: s.SpanContext().SpanID().String(),
			Parent: s.Parent().SpanID().String()}
		for _, kv := range s.Attributes() {
			if kv.Key == otel.AttrAttempt {
				out.Attempt = kv.Value.AsInt64()
			}
		}
		if err := enc.Encode(out); err != nil {
			return err
		}
	}
	return nil
}

func (fileExporter) Shutdown(context.Context) error { return nil }

// TestTraceCrashChild is the child process; it does nothing in a normal run.
//
//nolint:paralleltest // a crash test's child process: alone in its process, which its parent kills
func TestTraceCrashChild(t *testing.T) {
	dir := os.Getenv("REPRISE_OTEL_CRASH_DIR")
	if dir == "" {
		t.Skip("only runs as the child of TestTraceSurvivesCrash")
	}
	st, err := sqlite.Open(t.Context(), filepath.Join(dir, "crash.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tr := otel.New(sdktrace.WithSyncer(fileExporter{filepath.Join(dir, "spans.json")}))
	e, err := reprise.New(reprise.Config{Store: st, Tracer: tr, Observer: tr,
		LeaseTTL: time.Second, RunLeaseTTL: time.Second, PollInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(crashDefs(filepath.Join(dir, "hung"), tr)...); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(t.Context()) }()
	if _, _, err := e.StartRun(t.Context(), "crash", []byte("1"), reprise.WithRunID("run-1"), reprise.WithTraceParent(callerTP)); err != nil {
		t.Fatal(err)
	}
	t.Fatal(<-done) // killed before
}

// A run whose process is killed mid-attempt, and finished by another
// process from its history, forms one trace: the caller's trace id on
// every span, the attempts of both processes children of one step span,
// child of the run's span, child of the caller's.
func TestTraceSurvivesCrash(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestTraceCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "REPRISE_OTEL_CRASH_DIR="+dir)
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("child output:\n%s", out)
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "hung")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child's second attempt did not start within 60s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed = true
	var exit *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &exit) {
		t.Fatalf("child: %v, want killed", err)
	}
	child := readSpans(t, filepath.Join(dir, "spans.json"))
	if len(child) != 1 || child[0].Name != "attempt flaky" || child[0].Attempt != 1 {
		t.Fatalf("the child emitted %+v, want the span of attempt 1 alone", child)
	}

	// This process takes the run over: the child's engine is gone, its
	// lease on attempt 2 is cut, the attempt fails as lost and attempt 3
	// runs here.
	st, err := sqlite.Open(t.Context(), filepath.Join(dir, "crash.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() }) // after the engine stops: cleanups run last first
	cfg, spansOf := tracing(t)
	cfg.Store, cfg.LeaseTTL, cfg.RunLeaseTTL, cfg.PollInterval = st, time.Second, time.Second, 100*time.Millisecond
	e := reprisetest.Run(t, *cfg, crashDefs("", nil)...)
	if run, err := e.WaitRun(t.Context(), "run-1"); err != nil || run.Status != reprise.RunCompleted {
		t.Fatalf("run-1: %v, %v; want completed", run, err)
	}
	var spans spanList
	for deadline := time.Now().Add(10 * time.Second); len(spans.all("run crash")) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // the run's span comes after its end is recorded
		spans = spansOf()
	}
	runSpan := spans.one(t, "run crash")
	step := spans.one(t, "step flaky")
	if runSpan.Parent.SpanID().String() != callerSpan || step.Parent.SpanID() != runSpan.SpanContext.SpanID() {
		t.Fatalf("run span's parent %v, step span's %v: want the caller's %s, and the run's %v",
			runSpan.Parent.SpanID(), step.Parent.SpanID(), callerSpan, runSpan.SpanContext.SpanID())
	}
	stepID := step.SpanContext.SpanID().String()
	if child[0].Trace != callerTrace || child[0].Parent != stepID {
		t.Fatalf("the child's attempt span is in trace %s under %s; want trace %s under the step span %s",
			child[0].Trace, child[0].Parent, callerTrace, stepID)
	}
	attempts := spans.all("attempt flaky")
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans here, want 2 (the lost one and the last): %v", len(attempts), spans.names())
	}
	outcomes := map[int64]string{}
	for _, a := range attempts {
		if a.SpanContext.TraceID().String() != callerTrace || a.Parent.SpanID().String() != stepID {
			t.Errorf("attempt %d: trace %v, parent %v; want %s, %s", attr(a, "reprise.attempt").AsInt64(),
				a.SpanContext.TraceID(), a.Parent.SpanID(), callerTrace, stepID)
		}
		outcomes[attr(a, "reprise.attempt").AsInt64()] = attr(a, "reprise.attempt.outcome").AsString()
	}
	if outcomes[2] != "worker_lost" || outcomes[3] != "ok" {
		t.Fatalf("attempt outcomes %v, want 2: worker_lost, 3: ok", outcomes)
	}
}

func readSpans(t *testing.T, path string) []fileSpan {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var spans []fileSpan
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var s fileSpan
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("span line %q: %v", sc.Text(), err)
		}
		spans = append(spans, s)
	}
	return spans
}
