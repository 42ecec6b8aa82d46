package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"reprise"
	"reprise/flow"
	"reprise/internal/redact"
	"reprise/internal/runfilter"
	"reprise/internal/runid"
	"reprise/store"
)

// busyRetryAfter is the Retry-After, in seconds, of a start refused as
// busy: runs wait to start for about as long as a few of their steps take.
const busyRetryAfter = 1

// oneStepWorkflow is the workflow name under which {"step": NAME} runs
// NAME as a one-step run.
func oneStepWorkflow(step string) string { return "step:" + step }

// startRequest is the body of POST /v1/runs.
type startRequest struct {
	Workflow string          `json:"workflow"`
	Step     string          `json:"step"`
	Flow     string          `json:"flow"`
	Input    json.RawMessage `json:"input"`
	ID       string          `json:"id"`
	// TraceParent is the W3C traceparent to start the run under; without
	// it, the request's traceparent header, if any.
	TraceParent string `json:"traceparent,omitempty"`
}

// runJSON is a run on the wire: every field present, null when unset.
type runJSON struct {
	ID        string           `json:"id"`
	Workflow  string           `json:"workflow"`
	Status    store.RunStatus  `json:"status"`
	Input     json.RawMessage  `json:"input"`
	Output    json.RawMessage  `json:"output"`
	Error     *store.ErrorInfo `json:"error"`
	CreatedAt time.Time        `json:"created_at"`
	UpdatedAt time.Time        `json:"updated_at"`
	// TraceParent is the run's trace context, absent when it has none.
	TraceParent string `json:"traceparent,omitempty"`
}

// runDetailJSON is a run as GET /v1/runs/{id} answers it: with the step it
// waits for that no worker has claimed for long, or null.
type runDetailJSON struct {
	runJSON
	Waiting *store.Waiting `json:"waiting"`
}

// wireRun is run as the API answers it, its payloads and error as
// redact.Run shows them: a run's input may hold a flow's URLs, whose
// credentials no answer gives.
func wireRun(run *store.Run) runJSON {
	r := redact.Run(run)
	out := runJSON{ID: r.ID, Workflow: r.Workflow, Status: r.Status, Input: r.Input, Output: r.Output,
		Error: r.Error, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, TraceParent: r.TraceParent}
	if len(out.Input) == 0 {
		out.Input = json.RawMessage("null")
	}
	if len(out.Output) == 0 {
		out.Output = json.RawMessage("null")
	}
	return out
}

func (a *api) startRun(w http.ResponseWriter, r *http.Request) {
	var req startRequest
	if p := decode(w, r, a.opts.MaxBodyBytes, &req); p != nil {
		writeProblem(w, p)
		return
	}
	workflow := req.Workflow
	switch {
	case req.Workflow == "" && req.Step == "" && req.Flow == "":
		writeProblem(w, invalid("workflow", `give "workflow" (a workflow's name), "step" (a step's name, for a one-step run) or "flow" (a flow's name)`))
		return
	case req.Workflow != "" && req.Step != "":
		writeProblem(w, invalid("step", `give one of "workflow", "step" and "flow"`))
		return
	case req.Flow != "" && (req.Workflow != "" || req.Step != ""):
		writeProblem(w, invalid("flow", `give one of "workflow", "step" and "flow"`))
		return
	case strings.HasPrefix(req.Workflow, flow.WorkflowPrefix):
		writeProblem(w, invalid("workflow", `%q runs a flow: start it with {"flow": %q}`, req.Workflow, strings.TrimPrefix(req.Workflow, flow.WorkflowPrefix)))
		return
	case req.Step != "":
		s, err := a.step(r.Context(), req.Step)
		if err != nil {
			a.internal(w, r, err)
			return
		}
		if s == nil {
			writeProblem(w, invalid("step", "step %q is not registered; register it with POST /v1/steps", req.Step))
			return
		}
		workflow = oneStepWorkflow(req.Step)
	}
	var opts []reprise.RunOption
	if req.ID != "" {
		if err := reprise.ValidateRunID(req.ID); err != nil {
			if strings.Contains(req.ID, "/") {
				err = fmt.Errorf("%w; an id with / is a child run's, which its parent starts", err)
			}
			writeProblem(w, invalid("id", "%v", err))
			return
		}
		opts = append(opts, reprise.WithRunID(req.ID))
	}
	tp, p := startTraceParent(r, req.TraceParent)
	if p != nil {
		writeProblem(w, p)
		return
	}
	if tp != "" {
		opts = append(opts, reprise.WithTraceParent(tp))
	}
	var (
		run     *reprise.Run
		created bool
		err     error
	)
	if req.Flow != "" {
		run, created, p, err = a.startFlowRun(r.Context(), req.Flow, req.Input, opts)
		if p != nil {
			writeProblem(w, p)
			return
		}
	} else {
		run, created, err = a.e.StartRun(r.Context(), workflow, req.Input, opts...)
	}
	switch {
	case errors.Is(err, reprise.ErrNotRegistered):
		writeProblem(w, invalid("workflow", "workflow %q is not registered in this server", req.Workflow))
		return
	case errors.Is(err, reprise.ErrBusy):
		w.Header().Set("Retry-After", strconv.Itoa(busyRetryAfter))
		writeProblem(w, &Problem{Type: ProblemBusy, Title: "Too Many Requests", Status: http.StatusTooManyRequests,
			Detail: "too many runs wait to start on this server; start this one again after Retry-After seconds"})
		return
	case err != nil:
		a.internal(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		a.metrics.runsStarted.Inc()
	}
	w.Header().Set("Location", "/v1/runs/"+url.PathEscape(run.ID))
	writeJSON(w, status, wireRun(run))
}

// startTraceParent is the trace context a start gives: the body's
// traceparent, else the request's traceparent header.
func startTraceParent(r *http.Request, body string) (string, *Problem) {
	if body != "" {
		if err := reprise.ValidateTraceParent(body); err != nil {
			return "", invalid("traceparent", "%v", err)
		}
		return body, nil
	}
	h := r.Header.Values("Traceparent")
	switch {
	case len(h) == 0:
		return "", nil
	case len(h) > 1:
		return "", invalid("traceparent", "the traceparent header is given %d times; give it once", len(h))
	}
	if err := reprise.ValidateTraceParent(h[0]); err != nil {
		return "", invalid("traceparent", "the traceparent header: %v", err)
	}
	return h[0], nil
}

// runList is the answer of GET /v1/runs.
type runList struct {
	Runs []runJSON `json:"runs"`
	// NextCursor, when set, is the cursor of the next page.
	NextCursor string `json:"next_cursor,omitempty"`
}

const (
	defaultListLimit = 100
	maxListLimit     = 1000
)

func (a *api) listRuns(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := &store.RunListParams{Limit: defaultListLimit}
	f, err := runfilter.Read(q, time.Now())
	if fe := (*runfilter.Error)(nil); errors.As(err, &fe) {
		writeProblem(w, invalid(fe.Param, "%s", fe.Reason))
		return
	}
	f.Apply(p)
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxListLimit {
			writeProblem(w, invalid("limit", "limit %q is not a number from 1 to %d", s, maxListLimit))
			return
		}
		p.Limit = n
	}
	if c := q.Get("cursor"); c != "" {
		if err := runid.Check(c); err != nil {
			writeProblem(w, invalid("cursor", "cursor is not a run id: %v", err))
			return
		}
		p.Before = c
	}
	limit := p.Limit
	p.Limit++ // one more tells whether there is a next page
	runs, err := a.st.RunList(r.Context(), p)
	if err != nil {
		a.internal(w, r, err)
		return
	}
	out := runList{Runs: make([]runJSON, 0, min(len(runs), limit))}
	if len(runs) > limit {
		runs = runs[:limit]
		out.NextCursor = runs[limit-1].ID
	}
	for _, run := range runs {
		out.Runs = append(out.Runs, wireRun(run))
	}
	writeJSON(w, http.StatusOK, out)
}

// runID reads the {id} of a run's path: any run's, a child run's too.
func runID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if err := runid.Check(id); err != nil {
		writeProblem(w, invalid("id", "%v", err))
		return "", false
	}
	return id, true
}

// runError answers an error of the store about run id.
func (a *api) runError(w http.ResponseWriter, r *http.Request, id string, err error) {
	var arg *reprise.ArgumentError
	switch {
	case errors.As(err, &arg):
		writeProblem(w, invalid(arg.Name, "%s", arg.Error()))
	case errors.Is(err, store.ErrNotFound):
		writeProblem(w, notFound("no run %q", id))
	case errors.Is(err, store.ErrRunFinished):
		writeProblem(w, &Problem{Type: ProblemRunFinished, Title: "Conflict", Status: http.StatusConflict,
			Detail: fmt.Sprintf("run %q has already finished", id)})
	case errors.Is(err, store.ErrNotRedrivable):
		writeProblem(w, &Problem{Type: ProblemNotRedrivable, Title: "Conflict", Status: http.StatusConflict,
			Detail: fmt.Sprintf("run %q did not fail because a step failed; only such runs can be redriven", id)})
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		// The client went away, or the server is stopping.
		writeProblem(w, &Problem{Type: ProblemUnavailable, Title: "Service Unavailable", Status: http.StatusServiceUnavailable,
			Detail: err.Error()})
	default:
		a.internal(w, r, err)
	}
}

// longPoll reads the wait and after parameters of a long-poll.
type longPoll struct {
	wait     time.Duration
	after    int64
	hasAfter bool
}

// readRunRead reads a read of run id that may be a long-poll. When it
// returns false it has answered.
func (a *api) readRunRead(w http.ResponseWriter, r *http.Request) (string, longPoll, bool) {
	id, ok := runID(w, r)
	if !ok {
		return "", longPoll{}, false
	}
	lp, ok := a.parseLongPoll(w, r)
	return id, lp, ok
}

func (a *api) parseLongPoll(w http.ResponseWriter, r *http.Request) (longPoll, bool) {
	var lp longPoll
	q := r.URL.Query()
	if s := q.Get("wait"); s != "" {
		d, err := parseWait(s)
		if err != nil {
			writeProblem(w, invalid("wait", "%v", err))
			return lp, false
		}
		lp.wait = min(d, a.opts.MaxWait)
	}
	if s := q.Get("after"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			writeProblem(w, invalid("after", "after %q is not a history sequence number (0 or more)", s))
			return lp, false
		}
		lp.after, lp.hasAfter = n, true
	}
	return lp, true
}

// parseWait reads a long-poll's wait: a Go duration ("5s", "1m30s") or a
// number of seconds.
func parseWait(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		secs, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || secs != secs || secs > 1e6 {
			return 0, fmt.Errorf("wait %q is not a duration (like 5s or 500ms)", s)
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d < 0 {
		return 0, fmt.Errorf("wait %q is negative", s)
	}
	return d, nil
}

// lastSeq returns the sequence number of a run's last event.
func (a *api) lastSeq(ctx context.Context, id string) (int64, error) {
	events, err := a.e.History(ctx, id)
	if err != nil || len(events) == 0 {
		return 0, err
	}
	return events[len(events)-1].Seq, nil
}

// waitForEvents waits up to d for run id to have an event after seq; it
// returns at once when it has one or has finished.
func (a *api) waitForEvents(ctx context.Context, id string, seq int64, d time.Duration) error {
	// The engine tells of the end of a run it executes at once; other
	// changes are seen by polling the history.
	waitCtx, cancel := context.WithTimeout(ctx, d)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		// Its return is the signal; the caller reads the run again.
		_, _ = a.e.WaitRun(waitCtx, id)
	}()
	defer func() { cancel(); <-finished }()
	return poll(waitCtx, d, finished, func(ctx context.Context) (bool, error) {
		events, err := a.st.HistoryList(ctx, &store.HistoryListParams{RunID: id, AfterSeq: seq})
		return len(events) > 0, err
	})
}

// baseline is the sequence number a long-poll waits to see passed: the
// client's after, else the run's last event now.
func (a *api) baseline(ctx context.Context, id string, lp longPoll) (int64, error) {
	if lp.hasAfter {
		return lp.after, nil
	}
	return a.lastSeq(ctx, id)
}

func (a *api) getRun(w http.ResponseWriter, r *http.Request) {
	id, lp, ok := a.readRunRead(w, r)
	if !ok {
		return
	}
	// The baseline is read before the run, so that a change in between
	// ends the wait at once rather than being missed.
	var seq int64
	var err error
	if lp.wait > 0 {
		seq, err = a.baseline(r.Context(), id, lp)
	}
	var run *store.Run
	if err == nil {
		run, err = a.e.GetRun(r.Context(), id)
	}
	if err == nil && lp.wait > 0 && !run.Status.Final() {
		if err = a.waitForEvents(r.Context(), id, seq, lp.wait); err == nil {
			run, err = a.e.GetRun(r.Context(), id)
		}
	}
	var waiting *store.Waiting
	if err == nil && !run.Status.Final() {
		waiting, err = a.e.RunWaiting(r.Context(), id)
	}
	if err != nil {
		a.runError(w, r, id, err)
		return
	}
	writeJSON(w, http.StatusOK, runDetailJSON{runJSON: wireRun(run), Waiting: waiting})
}

// historyJSON is the answer of GET /v1/runs/{id}/history.
type historyJSON struct {
	Events []store.Event `json:"events"`
}

func (a *api) history(w http.ResponseWriter, r *http.Request) {
	id, lp, ok := a.readRunRead(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	events, err := a.st.HistoryList(ctx, &store.HistoryListParams{RunID: id, AfterSeq: lp.after})
	if err == nil && lp.wait > 0 && (len(events) == 0 || !lp.hasAfter) && !finished(events) {
		// Wait for an event past what the client has, or past what there
		// is now; a finished run has none to come.
		seq := lp.after
		if len(events) > 0 {
			seq = events[len(events)-1].Seq
		}
		var run *store.Run
		if run, err = a.e.GetRun(ctx, id); err == nil && !run.Status.Final() {
			if err = a.waitForEvents(ctx, id, seq, lp.wait); err == nil {
				events, err = a.st.HistoryList(ctx, &store.HistoryListParams{RunID: id, AfterSeq: lp.after})
			}
		}
	}
	if err != nil {
		a.runError(w, r, id, err)
		return
	}
	if events == nil {
		events = []store.Event{}
	}
	// Each step's input and error shown as redact.Events gives them, as a
	// run's are (wireRun); a claim gives the worker the input as it is.
	writeJSON(w, http.StatusOK, historyJSON{Events: redact.Events(events)})
}

// finished reports whether events end with the run's end.
func finished(events []store.Event) bool {
	if len(events) == 0 {
		return false
	}
	return events[len(events)-1].Type.EndsRun()
}

// cancelRequest is the optional body of POST /v1/runs/{id}/cancel.
type cancelRequest struct {
	Reason string `json:"reason"`
}

func (a *api) cancelRun(w http.ResponseWriter, r *http.Request) {
	req := cancelRequest{Reason: "cancelled through the API"}
	a.runAction(w, r, &req, func(ctx context.Context, id string) error { return a.e.CancelRun(ctx, id, req.Reason) })
}

// runAction decodes an optional body into req, applies act to the run and
// answers the run as it is then.
func (a *api) runAction(w http.ResponseWriter, r *http.Request, req any, act func(ctx context.Context, id string) error) {
	id, ok := runID(w, r)
	if !ok {
		return
	}
	if r.ContentLength != 0 {
		if p := decode(w, r, a.opts.MaxBodyBytes, req); p != nil {
			writeProblem(w, p)
			return
		}
	}
	if err := act(r.Context(), id); err != nil {
		a.runError(w, r, id, err)
		return
	}
	run, err := a.e.GetRun(r.Context(), id)
	if err != nil {
		a.runError(w, r, id, err)
		return
	}
	writeJSON(w, http.StatusOK, wireRun(run))
}

// poll calls ready until it says true, d has passed or ctx ends, first at
// once, then at intervals growing from 5 ms to 100 ms; it returns when
// wake is closed (nil: never). Neither the end of d nor of ctx is an
// error: the caller answers what it has.
func poll(ctx context.Context, d time.Duration, wake <-chan struct{}, ready func(context.Context) (bool, error)) error {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	interval := 5 * time.Millisecond
	next := time.NewTimer(0)
	defer next.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-deadline.C:
			return nil
		case <-next.C:
		case <-wake:
			return nil
		}
		ok, err := ready(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if ok || err != nil {
			return err
		}
		next.Reset(interval)
		interval = min(2*interval, 100*time.Millisecond)
	}
}

type redriveRequest struct {
	By string `json:"by"`
}

// redriveRun gives a run that failed on a step a fresh attempt budget.
func (a *api) redriveRun(w http.ResponseWriter, r *http.Request) {
	req := redriveRequest{By: "the API"}
	a.runAction(w, r, &req, func(ctx context.Context, id string) error { return a.e.RedriveRun(ctx, id, req.By) })
}

type signalRequest struct {
	Name    string          `json:"name"`
	Payload json.RawMessage `json:"payload"`
}

// signalRun sends a signal to a run.
func (a *api) signalRun(w http.ResponseWriter, r *http.Request) {
	id, ok := runID(w, r)
	if !ok {
		return
	}
	var req signalRequest
	if p := decode(w, r, a.opts.MaxBodyBytes, &req); p != nil {
		writeProblem(w, p)
		return
	}
	if len(req.Payload) == 0 {
		req.Payload = json.RawMessage("null")
	}
	if err := a.e.SignalRun(r.Context(), id, req.Name, req.Payload); err != nil {
		a.runError(w, r, id, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}
