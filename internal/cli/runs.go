package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"reprise"
	"reprise/internal/runfilter"
	"reprise/internal/strictjson"
	"reprise/store"
)

// runsBackend is what the run commands need, from a database (--db) or
// from a server (--server).
type runsBackend interface {
	StartRun(ctx context.Context, workflow string, input json.RawMessage, id string) (*store.Run, bool, error)
	ListRuns(ctx context.Context, p *store.RunListParams) ([]*store.Run, error)
	GetRun(ctx context.Context, id string) (*store.Run, error)
	History(ctx context.Context, id string) ([]store.Event, error)
	CancelRun(ctx context.Context, id, reason string) error
	RedriveRun(ctx context.Context, id, by string) error
	SignalRun(ctx context.Context, id, name string, payload json.RawMessage) error
	Close() error
}

// storeBackend runs the commands on a store directly. A run it starts is
// unowned: the next engine on that database (reprise server) executes it.
type storeBackend struct{ s store.Store }

func (b storeBackend) StartRun(ctx context.Context, workflow string, input json.RawMessage, id string) (*store.Run, bool, error) {
	if id == "" {
		id = reprise.NewRunID()
	} else if err := reprise.ValidateRunID(id); err != nil {
		return nil, false, err
	}
	lease, created, err := b.s.RunCreate(ctx, &store.RunCreateParams{ID: id, Workflow: workflow, Input: input})
	return lease.Run, created, err
}

func (b storeBackend) ListRuns(ctx context.Context, p *store.RunListParams) ([]*store.Run, error) {
	return b.s.RunList(ctx, p)
}

// unclaimedAfter is how long a step may wait for a worker before show
// reports it: the engine's default UnclaimedAfter.
const unclaimedAfter = 30 * time.Second

// whyUnclaimed is why a step waits, as far as a command on the database
// can tell: which steps a server registered is the server's to know.
const whyUnclaimed = "no worker has claimed it (whether any registered the step, only --server can tell)"

func (b storeBackend) GetRun(ctx context.Context, id string) (*store.Run, error) {
	run, err := b.s.RunGet(ctx, id)
	if err != nil || run.Status.Final() {
		return run, err
	}
	tasks, err := b.s.TaskListWaiting(ctx, &store.TaskListWaitingParams{RunID: id, ReadyFor: unclaimedAfter, Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(tasks) > 0 {
		t := tasks[0]
		run.Waiting = &store.Waiting{Step: t.Step, Position: t.Position, Since: t.ReadyAt, Why: whyUnclaimed}
	}
	return run, nil
}

func (b storeBackend) History(ctx context.Context, id string) ([]store.Event, error) {
	return b.s.HistoryList(ctx, &store.HistoryListParams{RunID: id})
}

func (b storeBackend) CancelRun(ctx context.Context, id, reason string) error {
	_, err := b.s.RunCancel(ctx, &store.RunCancelParams{ID: id, Reason: reason})
	return err
}

func (b storeBackend) RedriveRun(ctx context.Context, id, by string) error {
	_, err := b.s.RunRedrive(ctx, &store.RunRedriveParams{ID: id, By: by})
	return err
}

func (b storeBackend) SignalRun(ctx context.Context, id, name string, payload json.RawMessage) error {
	_, err := b.s.SignalSend(ctx, &store.SignalSendParams{RunID: id, Name: name, Payload: payload})
	return err
}

func (b storeBackend) Close() error { return b.s.Close() }

// backendFlags are the flags that say where runs live.
type backendFlags struct {
	db     string
	server string
	token  string
}

func (f *backendFlags) register(fs *flag.FlagSet) {
	dbVar(fs, &f.db, defaultDB, dbUsage)
	fs.StringVar(&f.server, "server", "", "a reprise server's URL (instead of --db)")
	fs.StringVar(&f.token, "token", "", "bearer token for --server (default $REPRISE_TOKEN)")
}

func (f *backendFlags) open(ctx context.Context) (runsBackend, error) {
	if f.server != "" {
		b, err := openServerBackend(f.server, f.token)
		if err != nil {
			return nil, err
		}
		return shownBackend{b}, nil
	}
	if path, ok := strings.CutPrefix(f.db, "sqlite:"); ok || !isPostgresURL(f.db) {
		// Opening creates a database; these commands only read or write
		// the runs of one.
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no database at %s: reprise server --db %s (or reprise migrate) makes one", path, path)
		}
	}
	s, err := openStore(ctx, f.db)
	if err != nil {
		return nil, err
	}
	return shownBackend{storeBackend{s}}, nil
}

// runsCommand parses a run command's flags and opens its backend; on
// failure it returns the exit code.
func runsCommand(name, synopsis string, args []string, stdout, stderr io.Writer, define func(*flag.FlagSet)) (b runsBackend, fs *flag.FlagSet, pos []string, code int, ok bool) {
	fs = newFlagSet(name, synopsis)
	var bf backendFlags
	bf.register(fs)
	if define != nil {
		define(fs)
	}
	pos, code, ok = parseArgs(fs, args, stdout, stderr)
	if !ok {
		return nil, fs, nil, code, false
	}
	return &lazyBackend{open: func() (runsBackend, error) { return bf.open(context.Background()) }}, fs, pos, exitOK, true
}

// lazyBackend opens its backend when a command first uses it, so that a
// command refuses its bad arguments before it opens a database.
type lazyBackend struct {
	open func() (runsBackend, error)
	b    runsBackend
	err  error
}

func (l *lazyBackend) get() (runsBackend, error) {
	if l.b == nil && l.err == nil {
		l.b, l.err = l.open()
	}
	return l.b, l.err
}

func (l *lazyBackend) StartRun(ctx context.Context, workflow string, input json.RawMessage, id string) (*store.Run, bool, error) {
	b, err := l.get()
	if err != nil {
		return nil, false, err
	}
	return b.StartRun(ctx, workflow, input, id)
}

func (l *lazyBackend) ListRuns(ctx context.Context, p *store.RunListParams) ([]*store.Run, error) {
	b, err := l.get()
	if err != nil {
		return nil, err
	}
	return b.ListRuns(ctx, p)
}

func (l *lazyBackend) GetRun(ctx context.Context, id string) (*store.Run, error) {
	b, err := l.get()
	if err != nil {
		return nil, err
	}
	return b.GetRun(ctx, id)
}

func (l *lazyBackend) History(ctx context.Context, id string) ([]store.Event, error) {
	b, err := l.get()
	if err != nil {
		return nil, err
	}
	return b.History(ctx, id)
}

func (l *lazyBackend) CancelRun(ctx context.Context, id, reason string) error {
	b, err := l.get()
	if err != nil {
		return err
	}
	return b.CancelRun(ctx, id, reason)
}

func (l *lazyBackend) RedriveRun(ctx context.Context, id, by string) error {
	b, err := l.get()
	if err != nil {
		return err
	}
	return b.RedriveRun(ctx, id, by)
}

func (l *lazyBackend) SignalRun(ctx context.Context, id, name string, payload json.RawMessage) error {
	b, err := l.get()
	if err != nil {
		return err
	}
	return b.SignalRun(ctx, id, name, payload)
}

func (l *lazyBackend) Close() error {
	if l.b == nil {
		return nil
	}
	return l.b.Close()
}

func runsMain(args []string, stdout, stderr io.Writer) int {
	var status, workflow, step, errorType, since, until string
	var limit int
	var asJSON bool
	b, fs, pos, code, ok := runsCommand("runs",
		"[--status S] [--workflow W] [--step N] [--error-type T] [--since A] [--until B] [--limit N] [--json]",
		args, stdout, stderr, func(fs *flag.FlagSet) {
			fs.StringVar(&status, "status", "", "only runs with this status: "+strings.Join(runfilter.Statuses, ", "))
			fs.StringVar(&workflow, "workflow", "", "only runs of this workflow")
			fs.StringVar(&step, "step", "", "only runs with a failing step of this name: it waits for or runs its retry, or failed for good")
			fs.StringVar(&errorType, "error-type", "", "only runs with a failing step whose last failed attempt had this error type (HTTP503, ...)")
			fs.StringVar(&since, "since", "", "only runs created at or after this: a time (2026-01-02T15:04:05Z) or a duration back from now (90m, 24h, 7d)")
			fs.StringVar(&until, "until", "", "only runs created before this, as --since")
			fs.IntVar(&limit, "limit", 20, "how many runs to list (1 to 1000)")
			fs.BoolVar(&asJSON, "json", false, "print JSON")
		})
	if !ok {
		return code
	}
	defer b.Close()
	if len(pos) > 0 {
		return usageErrorf(fs, stderr, "unexpected argument %q", pos[0])
	}
	if limit < 1 || limit > 1000 {
		return usageErrorf(fs, stderr, "--limit %d is out of range (1 to 1000)", limit)
	}
	// The filters read as the API reads its query: one parser, one meaning.
	f, err := runfilter.Read(url.Values{"status": {status}, "workflow": {workflow}, "step": {step},
		"error_type": {errorType}, "since": {since}, "until": {until}}, time.Now())
	if err != nil {
		if fe := (*runfilter.Error)(nil); errors.As(err, &fe) {
			return usageErrorf(fs, stderr, "--%s: %s", strings.ReplaceAll(fe.Param, "_", "-"), fe.Reason)
		}
		return usageErrorf(fs, stderr, "%v", err)
	}
	p := &store.RunListParams{Limit: limit}
	f.Apply(p)
	runs, err := b.ListRuns(context.Background(), p)
	if err != nil {
		fmt.Fprintf(stderr, "reprise runs: %v\n", err)
		return exitFail
	}
	if asJSON {
		return writeJSON(fs, stdout, stderr, runs)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tWORKFLOW\tSTATUS\tCREATED\tUPDATED")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.ID, r.Workflow, r.Status,
			r.CreatedAt.Local().Format(time.DateTime), r.UpdatedAt.Local().Format(time.DateTime))
	}
	tw.Flush()
	return exitOK
}

func showMain(args []string, stdout, stderr io.Writer) int {
	var asJSON bool
	b, fs, pos, code, ok := runsCommand("show", "RUN [--json]", args, stdout, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print JSON")
	})
	if !ok {
		return code
	}
	defer b.Close()
	if len(pos) != 1 {
		return usageErrorf(fs, stderr, "want one run id, got %d arguments", len(pos))
	}
	run, err := b.GetRun(context.Background(), pos[0])
	if err != nil {
		return runError(stderr, "show", pos[0], err)
	}
	if asJSON {
		return writeJSON(fs, stdout, stderr, run)
	}
	fmt.Fprintf(stdout, "id        %s\nworkflow  %s\nstatus    %s\ncreated   %s\nupdated   %s\ninput     %s\n",
		run.ID, run.Workflow, run.Status, run.CreatedAt.Local().Format(time.RFC3339Nano),
		run.UpdatedAt.Local().Format(time.RFC3339Nano), run.Input)
	if len(run.Output) > 0 {
		fmt.Fprintf(stdout, "output    %s\n", run.Output)
	}
	if e := run.Error; e != nil {
		fmt.Fprintf(stdout, "error     %s: %s\n", e.Type, e.Message)
		if e.Step != "" {
			fmt.Fprintf(stdout, "          step %s (position %d), after %d attempt(s): %s\n", e.Step, e.Position, e.Attempts, e.Reason)
		}
	}
	if w := run.Waiting; w != nil {
		fmt.Fprintf(stdout, "waiting   step %s (position %d) since %s: %s\n", w.Step, w.Position,
			w.Since.Local().Format(time.RFC3339Nano), w.Why)
	}
	return exitOK
}

func historyMain(args []string, stdout, stderr io.Writer) int {
	var asJSON bool
	b, fs, pos, code, ok := runsCommand("history", "RUN [--json]", args, stdout, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print the events as JSON")
	})
	if !ok {
		return code
	}
	defer b.Close()
	if len(pos) != 1 {
		return usageErrorf(fs, stderr, "want one run id, got %d arguments", len(pos))
	}
	ctx := context.Background()
	run, err := b.GetRun(ctx, pos[0])
	if err != nil {
		return runError(stderr, "history", pos[0], err)
	}
	events, err := b.History(ctx, pos[0])
	if err != nil {
		return runError(stderr, "history", pos[0], err)
	}
	if asJSON {
		return writeJSON(fs, stdout, stderr, map[string]any{"events": events})
	}
	writeTimeline(stdout, run, events)
	if f := flowOfRun(run); f != nil {
		fmt.Fprintln(stdout)
		writeFlowSteps(stdout, f, events)
	}
	return exitOK
}

func cancelMain(args []string, stdout, stderr io.Writer) int {
	var reason string
	b, fs, pos, code, ok := runsCommand("cancel", "RUN [--reason TEXT]", args, stdout, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&reason, "reason", "cancelled from the command line", "why, for the history")
	})
	if !ok {
		return code
	}
	defer b.Close()
	if len(pos) != 1 {
		return usageErrorf(fs, stderr, "want one run id, got %d arguments", len(pos))
	}
	if err := b.CancelRun(context.Background(), pos[0], reason); err != nil {
		return runError(stderr, "cancel", pos[0], err)
	}
	fmt.Fprintf(stdout, "cancelled %s\n", pos[0])
	return exitOK
}

func startMain(args []string, stdout, stderr io.Writer) int {
	var input, id string
	b, fs, pos, code, ok := runsCommand("run", "WORKFLOW [--input JSON] [--id ID]", args, stdout, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&input, "input", "null", "the run's input, as JSON")
		fs.StringVar(&id, "id", "", "the run's id; starting an existing id returns that run")
	})
	if !ok {
		return code
	}
	defer b.Close()
	if len(pos) != 1 {
		return usageErrorf(fs, stderr, "want one workflow name, got %d arguments", len(pos))
	}
	if err := checkJSONFlag("--input", input); err != nil {
		return usageErrorf(fs, stderr, "%v", err)
	}
	if id != "" {
		if err := reprise.ValidateRunID(id); err != nil {
			return usageErrorf(fs, stderr, "--id: %v", err)
		}
	}
	run, created, err := b.StartRun(context.Background(), pos[0], json.RawMessage(input), id)
	if err != nil {
		fmt.Fprintf(stderr, "reprise run: %v\n", err)
		return exitFail
	}
	verb := "started"
	if !created {
		verb = "exists"
	}
	fmt.Fprintf(stdout, "%s %s (%s)\n", verb, run.ID, run.Status)
	return exitOK
}

// checkJSONFlag reports what is wrong with the JSON value of a flag, as
// the API would refuse it.
func checkJSONFlag(name, value string) error {
	if err := strictjson.Check([]byte(value)); err != nil {
		return fmt.Errorf("%s is not JSON as the API takes it (%w): %q", name, err, clip(value, 40))
	}
	return nil
}

func redriveMain(args []string, stdout, stderr io.Writer) int {
	by := os.Getenv("USER")
	b, fs, pos, code, ok := runsCommand("redrive", "RUN [--by NAME]", args, stdout, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&by, "by", by, "who redrives it, for the history")
	})
	if !ok {
		return code
	}
	defer b.Close()
	if len(pos) != 1 {
		return usageErrorf(fs, stderr, "want one run id, got %d arguments", len(pos))
	}
	if by == "" {
		by = "reprise redrive"
	}
	if err := b.RedriveRun(context.Background(), pos[0], by); err != nil {
		if errors.Is(err, store.ErrNotRedrivable) {
			fmt.Fprintf(stderr, "reprise redrive: run %q did not fail because a step failed; only such runs can be redriven\n", pos[0])
			return exitFail
		}
		return runError(stderr, "redrive", pos[0], err)
	}
	fmt.Fprintf(stdout, "redriven %s: its failed step has a fresh attempt budget\n", pos[0])
	return exitOK
}

func signalMain(args []string, stdout, stderr io.Writer) int {
	var payload string
	b, fs, pos, code, ok := runsCommand("signal", "RUN NAME [--payload JSON]", args, stdout, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&payload, "payload", "null", "the signal's payload, as JSON")
	})
	if !ok {
		return code
	}
	defer b.Close()
	if len(pos) != 2 {
		return usageErrorf(fs, stderr, "want a run id and a signal name, got %d arguments", len(pos))
	}
	if err := checkJSONFlag("--payload", payload); err != nil {
		return usageErrorf(fs, stderr, "%v", err)
	}
	if err := b.SignalRun(context.Background(), pos[0], pos[1], json.RawMessage(payload)); err != nil {
		return runError(stderr, "signal", pos[0], err)
	}
	fmt.Fprintf(stdout, "sent %s to %s\n", pos[1], pos[0])
	return exitOK
}

func runError(stderr io.Writer, cmd, id string, err error) int {
	if errors.Is(err, store.ErrNotFound) {
		fmt.Fprintf(stderr, "reprise %s: no run %q\n", cmd, id)
	} else {
		fmt.Fprintf(stderr, "reprise %s: %v\n", cmd, err)
	}
	return exitFail
}
