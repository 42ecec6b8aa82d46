package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"reprise"
	"reprise/flow"
	"reprise/httpstep"
	"reprise/internal/redact"
	"reprise/postgres"
	"reprise/store"
)

// flowMain is "reprise flow": check a flow file, or run it.
func flowMain(args []string, stdout, stderr io.Writer) int {
	const sub = "usage: reprise flow check FILE\n       reprise flow run FILE [--input JSON] [--db DB] [--id RUN] [--json]\n" +
		"       reprise flow push FILE --server URL [--token TOKEN]\n       reprise flow list --server URL [--json]\n" +
		"       reprise flow show NAME [--version N] --server URL\n"
	if len(args) == 0 {
		fmt.Fprint(stderr, sub)
		return exitUsage
	}
	switch args[0] {
	case "check":
		return flowCheckMain(args[1:], stdout, stderr)
	case "run":
		return flowRunMain(args[1:], stdout, stderr)
	case "push":
		return flowPushMain(args[1:], stdout, stderr)
	case "list":
		return flowListMain(args[1:], stdout, stderr)
	case "show":
		return flowShowMain(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, sub)
		return exitOK
	}
	fmt.Fprintf(stderr, "reprise flow: unknown command %q\n%s", args[0], sub)
	return exitUsage
}

// readFlow reads and parses a flow file; on error it prints every fault
// found, one per line, and returns the exit code.
func readFlow(name, file string, stderr io.Writer) (*flow.Flow, int, bool) {
	src, err := readFlowFile(file)
	if err != nil {
		fmt.Fprintf(stderr, "reprise %s: %v\n", name, err)
		return nil, exitUsage, false
	}
	f, err := flow.Parse(file, src)
	if err != nil {
		fmt.Fprintln(stderr, err)
		var list flow.ErrorList
		if errors.As(err, &list) {
			fmt.Fprintf(stderr, "reprise %s: %d error(s) in %s\n", name, len(list), file)
		}
		return nil, exitUsage, false
	}
	return f, exitOK, true
}

// readFlowFile reads a flow file, refusing one over flow.MaxFileSize
// without reading the rest: it may be a device that never ends.
func readFlowFile(file string) ([]byte, error) {
	fd, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer fd.Close()
	src, err := io.ReadAll(io.LimitReader(fd, flow.MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(src) > flow.MaxFileSize {
		return nil, fmt.Errorf("%s has over %d bytes; a flow file has at most %d", file, flow.MaxFileSize, flow.MaxFileSize)
	}
	return src, nil
}

func flowCheckMain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("flow check", "FILE")
	pos, code, ok := parseArgs(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageErrorf(fs, stderr, "want one flow file, got %d arguments", len(pos))
	}
	f, code, ok := readFlow("flow check", pos[0], stderr)
	if !ok {
		return code
	}
	fmt.Fprintf(stdout, "%s: flow %s is valid: %d step(s), goals %s\n", pos[0], f.Name, len(f.Steps), strings.Join(f.Goals, ", "))
	return exitOK
}

func flowRunMain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("flow run", "FILE [--input JSON] [--db DB] [--id RUN] [--json]")
	input := fs.String("input", "null", "the run's input, as JSON")
	db := new(string)
	dbVar(fs, db, defaultDB, dbUsage)
	id := fs.String("id", "", "the run's `ID`; a run of that id that exists already is resumed, not started again (default: a new id)")
	workerID := fs.String("worker-id", os.Getenv("REPRISE_WORKER_ID"), "the engine's `ID` in leases and history; restarted under the id of one that was killed, it takes that one's work back at once (default $REPRISE_WORKER_ID, else host-pid-random)")
	asJSON := fs.Bool("json", false, "print the run and its history as JSON instead of a timeline")
	pos, code, ok := parseArgs(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageErrorf(fs, stderr, "want one flow file, got %d arguments", len(pos))
	}
	if err := checkJSONFlag("--input", *input); err != nil {
		return usageErrorf(fs, stderr, "%v", err)
	}
	if *id != "" {
		if err := reprise.ValidateRunID(*id); err != nil {
			return usageErrorf(fs, stderr, "--id: %v", err)
		}
	}
	f, code, ok := readFlow("flow run", pos[0], stderr)
	if !ok {
		return code
	}
	if err := f.CheckInput(json.RawMessage(*input)); err != nil {
		return usageErrorf(fs, stderr, "--input: %v", err)
	}
	for _, s := range f.Steps {
		if s.Kind == flow.KindPull {
			return usageErrorf(fs, stderr, "step %s is a pull step: pull workers claim its attempts from a server (reprise server); flow run has none", s.Name)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	st, err := openEngineStore(ctx, *db, postgres.Options{})
	if err != nil {
		fmt.Fprintf(stderr, "reprise flow run: %v\n", err)
		return exitFail
	}
	defer st.Close()
	e, err := reprise.New(reprise.Config{Store: st, WorkerID: *workerID})
	if err != nil {
		fmt.Fprintf(stderr, "reprise flow run: %v\n", err)
		return exitFail
	}
	caller, err := httpstep.New(httpstep.Options{})
	if err == nil {
		err = flow.Register(e, f, &flow.Options{Caller: caller})
	}
	if err == nil {
		err = registerNamedSteps(ctx, e, st, f, caller)
	}
	if err != nil {
		fmt.Fprintf(stderr, "reprise flow run: %v\n", err)
		return exitFail
	}
	engineCtx, stopEngine := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- e.Run(engineCtx) }()
	defer func() {
		stopEngine()
		if err := <-done; err != nil {
			fmt.Fprintf(stderr, "reprise flow run: %v\n", err)
		}
	}()

	var opts []reprise.RunOption
	if *id != "" {
		opts = append(opts, reprise.WithRunID(*id))
	}
	run, created, err := flow.Start(ctx, e, f, json.RawMessage(*input), opts...)
	if err != nil {
		fmt.Fprintf(stderr, "reprise flow run: %v\n", err)
		return exitFail
	}
	if !created && run.Workflow != f.Workflow() {
		fmt.Fprintf(stderr, "reprise flow run: run %s is a run of %s, not of flow %s\n", run.ID, run.Workflow, f.Name)
		return exitFail
	}
	verb := "started"
	if !created {
		verb = "resumed" // it keeps the flow it started with
	}
	fmt.Fprintf(stderr, "reprise flow run: %s run %s of flow %s on %s\n", verb, run.ID, f.Name, redact.String(*db))
	runID := run.ID
	var waitErr error
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		run, waitErr = e.WaitRun(ctx, runID)
	}()
	select {
	case <-waited:
		err = waitErr
	case err = <-done:
		// The engine stopped by itself: it could not start. Its error is
		// the command's; the wait for the run ends with ctx.
		done <- nil // for the deferred stop
		stop()
		<-waited
		fmt.Fprintf(stderr, "reprise flow run: %v\n", err)
		return exitFail
	}
	if ctx.Err() != nil {
		fmt.Fprintf(stderr, "reprise flow run: stopped; the run goes on where it is when you run it again: reprise flow run %s --id %s --db %s\n",
			pos[0], runID, redact.String(*db))
		return exitFail
	}
	if err != nil {
		fmt.Fprintf(stderr, "reprise flow run: %v\n", err)
		return exitFail
	}
	events, err := e.History(ctx, run.ID)
	if err != nil {
		fmt.Fprintf(stderr, "reprise flow run: %v\n", err)
		return exitFail
	}
	// Printed as the run commands print runs (shownBackend): the run's
	// input holds the flow's URLs.
	run, events = redact.Run(run), redact.Events(events)
	if *asJSON {
		if code := writeJSON(fs, stdout, stderr, map[string]any{"run": run, "events": events}); code != exitOK {
			return code
		}
	} else {
		writeTimeline(stdout, run, events)
		fmt.Fprintln(stdout)
		writeFlowSteps(stdout, f, events)
		if run.Status == store.RunCompleted {
			var out bytes.Buffer
			if json.Indent(&out, run.Output, "", "  ") != nil {
				out.Reset()
				out.Write(run.Output)
			}
			fmt.Fprintf(stdout, "\noutput %s\n", out.String())
		}
		fmt.Fprintf(stdout, "\nSee it again with: reprise history %s --db %s\n", run.ID, redact.String(*db))
	}
	if run.Status != store.RunCompleted {
		return exitFail
	}
	return exitOK
}

// registerNamedSteps registers the steps of kind step that f names, from
// their definitions in st, e's store (registered through a server's API
// on this database): flow run has no other steps.
func registerNamedSteps(ctx context.Context, e *reprise.Engine, st store.Store, f *flow.Flow, caller *httpstep.Caller) error {
	var errs []error
	for _, s := range f.Steps {
		if s.Kind != flow.KindStep || e.HasStep(s.Target) {
			continue
		}
		def, err := st.StepDefGet(ctx, &store.StepDefGetParams{Name: s.Target})
		switch {
		case errors.Is(err, store.ErrNotFound):
			errs = append(errs, fmt.Errorf("step %s calls step %s, which this database does not define: register it with POST /v1/steps on a server that uses it", s.Name, s.Target))
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("step %s: %w", s.Name, err))
			continue
		case def.Kind != "http":
			errs = append(errs, fmt.Errorf("step %s calls step %s, a %s step: its workers claim it from a server; flow run has none", s.Name, s.Target, def.Kind))
			continue
		}
		if err := e.RegisterStepDefinition(def, storedHTTPStep(st, caller, s.Target)); err != nil {
			errs = append(errs, fmt.Errorf("step %s: %w", s.Name, err))
		}
	}
	return errors.Join(errs...)
}

// storedHTTPStep calls, for each attempt, the URL of the version of the
// step stored in st that the attempt was scheduled under.
func storedHTTPStep(st store.Store, caller *httpstep.Caller, name string) func(context.Context, json.RawMessage) (json.RawMessage, error) {
	return func(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
		info, _ := reprise.StepInfoFrom(ctx)
		def, err := st.StepDefGet(ctx, &store.StepDefGetParams{Name: name, Version: info.StepVersion})
		if err != nil {
			return nil, fmt.Errorf("step %s version %d: %w", name, info.StepVersion, err)
		}
		return caller.Call(ctx, def.URL, httpstep.StepRequest(info, input))
	}
}

// flowStep is what a run's history says of one step of its flow.
type flowStep struct {
	status   string // "", completed, FAILED, skipped
	items    int    // work items scheduled; 0 for a step without
	attempts map[int]int
	failed   map[int]string // item → its error
	optional bool
}

// writeFlowSteps prints each step of the flow as the run's history left
// it, work items grouped under their step.
func writeFlowSteps(w io.Writer, f *flow.Flow, events []store.Event) {
	steps := map[string]*flowStep{}
	for _, s := range f.Steps {
		steps[s.Name] = &flowStep{attempts: map[int]int{}, failed: map[int]string{}, optional: s.Optional}
	}
	type ref struct {
		step  string
		index int
	}
	byPos := map[int]ref{}
	for _, ev := range events {
		if ev.Type == store.EventVersionMarker && strings.HasPrefix(ev.Change, flow.SkipMarker) {
			if st := steps[strings.TrimPrefix(ev.Change, flow.SkipMarker)]; st != nil {
				st.status = "skipped"
			}
			continue
		}
		if ev.Type == store.EventStepScheduled {
			name, index, ok := flow.ItemOf(ev.IdempotencyKey)
			if st := steps[name]; ok && st != nil {
				byPos[ev.Position] = ref{name, index}
				if index >= 0 {
					st.items++
				}
			}
			continue
		}
		r, ok := byPos[ev.Position]
		if !ok {
			continue
		}
		st := steps[r.step]
		switch ev.Type {
		case store.EventAttemptStarted:
			st.attempts[r.index]++
		case store.EventStepFailed:
			st.failed[r.index] = errText(ev.Error)
		case store.EventStepCancelRequested:
			if _, done := st.failed[r.index]; !done {
				st.failed[r.index] = "cancelled"
			}
		}
	}
	width := 4
	for _, s := range f.Steps {
		width = max(width, len(s.Name))
	}
	fmt.Fprintf(w, "flow %s, goals %s\n", f.Name, strings.Join(f.Goals, ", "))
	for _, s := range f.Steps {
		st := steps[s.Name]
		var line string
		switch {
		case st.status == "skipped":
			line = "skipped: a step it needs failed or was skipped"
		case len(st.attempts) == 0 && len(st.failed) == 0:
			line = "not started"
		case s.Foreach == nil:
			line = fmt.Sprintf("%d attempt(s)", st.attempts[-1])
			if e, bad := st.failed[-1]; bad {
				line = "FAILED after " + line + ": " + e
			}
		default:
			var parts []string
			for i := range st.items {
				part := fmt.Sprintf("[%d] %d", i, st.attempts[i])
				if e, bad := st.failed[i]; bad {
					part += " FAILED " + e
				}
				parts = append(parts, part)
			}
			line = fmt.Sprintf("%d item(s), attempts per item: %s", st.items, strings.Join(parts, ", "))
		}
		var tags []string
		if slices.Contains(f.Goals, s.Name) {
			tags = append(tags, "goal")
		}
		if s.Optional {
			tags = append(tags, "optional")
		}
		tag := ""
		if len(tags) > 0 {
			tag = " (" + strings.Join(tags, ", ") + ")"
		}
		fmt.Fprintf(w, "  %-*s  %s%s\n", width, s.Name, line, tag)
	}
}

// flowOfRun returns the flow a run of a flow carries, or nil for a run of
// anything else (or one whose flow does not parse).
func flowOfRun(run *store.Run) *flow.Flow {
	if !strings.HasPrefix(run.Workflow, flow.WorkflowPrefix) {
		return nil
	}
	var in flow.RunInput
	if json.Unmarshal(run.Input, &in) != nil {
		return nil
	}
	f, err := flow.Parse("flow", in.Flow)
	if err != nil {
		return nil
	}
	return f
}
