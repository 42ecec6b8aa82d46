package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"reprise/httpstep"
	"reprise/retry"
	"reprise/store"
)

// claimRequest is the body of POST /v1/tasks/claim.
type claimRequest struct {
	// Worker names the worker in the history (AttemptStarted); absent
	// or empty, the connection's remote address names it (pullWorker).
	Worker string   `json:"worker,omitempty"`
	Steps  []string `json:"steps"`
	// Max is how many tasks to take at most: 1 (default) to maxClaim.
	Max int `json:"max,omitempty"`
	// Wait is how long to wait for a task when none is ready ("5s").
	Wait string `json:"wait"`
}

const maxClaim = 100

// A Task is an attempt a pull worker claimed: do the work, then complete
// or fail it with Token before LeaseUntil (heartbeat to extend it).
type Task struct {
	ID             int64           `json:"id"`
	Token          int64           `json:"token"`
	RunID          string          `json:"run_id"`
	Step           string          `json:"step"`
	Attempt        int             `json:"attempt"`
	IdempotencyKey string          `json:"idempotency_key"`
	Input          json.RawMessage `json:"input"`
	// Deadline is when the attempt times out (its policy's timeout or
	// deadline); absent when it has none.
	Deadline   time.Time `json:"deadline,omitzero"`
	LeaseUntil time.Time `json:"lease_until"`
	// TraceParent is the W3C traceparent of the attempt's span, for the
	// worker's spans to join the run's trace; absent when the server
	// traces nothing.
	TraceParent string `json:"traceparent,omitempty"`
}

func wireTask(t *store.Task) Task {
	out := Task{ID: t.ID, Token: t.Token, RunID: t.RunID, Step: t.Step, Attempt: t.Attempt,
		IdempotencyKey: t.IdempotencyKey, Input: t.Input, LeaseUntil: t.LeaseUntil}
	if len(out.Input) == 0 {
		out.Input = json.RawMessage("null")
	}
	if t.Timeout > 0 {
		out.Deadline = t.StartedAt.Add(t.Timeout)
	}
	var pol retry.Policy
	if json.Unmarshal(t.Policy, &pol) == nil && pol.Deadline > 0 {
		first := t.FirstStartedAt
		if first.IsZero() {
			first = t.StartedAt
		}
		if d := first.Add(pol.Deadline); out.Deadline.IsZero() || d.Before(out.Deadline) {
			out.Deadline = d
		}
	}
	return out
}

// claimList is the answer of POST /v1/tasks/claim.
type claimList struct {
	Tasks []Task `json:"tasks"`
}

func (a *api) claim(w http.ResponseWriter, r *http.Request) {
	req := claimRequest{Max: 1}
	if p := decode(w, r, a.opts.MaxBodyBytes, &req); p != nil {
		writeProblem(w, p)
		return
	}
	if req.Worker == "" {
		req.Worker = pullWorker(r)
	}
	wait, p := a.checkClaim(&req)
	var err error
	if p == nil {
		p, err = a.checkPullSteps(r.Context(), req.Steps)
	}
	if err != nil {
		a.internal(w, r, err)
		return
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	var tasks []*store.Task
	err = poll(r.Context(), wait, nil, func(ctx context.Context) (bool, error) {
		var err error
		tasks, err = a.e.ClaimTasks(ctx, req.Worker, req.Steps, req.Max)
		return len(tasks) > 0 || wait == 0, err
	})
	if err != nil {
		a.internal(w, r, err)
		return
	}
	a.metrics.tasksClaimed.Add(float64(len(tasks)))
	out := claimList{Tasks: make([]Task, 0, len(tasks))}
	for _, t := range tasks {
		wt := wireTask(t)
		wt.TraceParent = a.e.AttemptTraceParent(t)
		out.Tasks = append(out.Tasks, wt)
	}
	writeJSON(w, http.StatusOK, out)
}

// pullWorker names a worker that does not name itself: "pull@" and the
// address its connection comes from ("pull@10.0.0.7:51234").
func pullWorker(r *http.Request) string {
	return "pull@" + r.RemoteAddr
}

// checkClaim validates a claim, fills its defaults and returns its wait.
func (a *api) checkClaim(req *claimRequest) (time.Duration, *Problem) {
	if len(req.Worker) > 200 {
		return 0, invalid("worker", "worker must name the worker in 1 to 200 characters")
	}
	if len(req.Steps) == 0 {
		return 0, invalid("steps", "give the names of the pull steps to claim tasks of")
	}
	if req.Max < 1 || req.Max > maxClaim {
		return 0, invalid("max", "max %d is not from 1 to %d", req.Max, maxClaim)
	}
	if req.Wait == "" {
		return 0, nil
	}
	d, err := parseWait(req.Wait)
	if err != nil {
		return 0, invalid("wait", "%v", err)
	}
	return min(d, a.opts.MaxWait), nil
}

// taskID reads the {id} of a task's path.
func taskID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	s := r.PathValue("id")
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		writeProblem(w, invalid("id", "task id %q is not a positive integer", s))
		return 0, false
	}
	return id, true
}

// tokened is the body of a worker's write: it carries the lease token.
type tokened interface{ leaseToken() int64 }

func (r *completeRequest) leaseToken() int64  { return r.Token }
func (r *failRequest) leaseToken() int64      { return r.Token }
func (r *heartbeatRequest) leaseToken() int64 { return r.Token }

// readTaskWrite reads a worker's write: the task id of the path and the
// body, which must hold a token. When it returns false it has answered.
func (a *api) readTaskWrite(w http.ResponseWriter, r *http.Request, req tokened) (int64, bool) {
	id, ok := taskID(w, r)
	if !ok {
		return 0, false
	}
	p := decode(w, r, a.opts.MaxBodyBytes, req)
	if p == nil && req.leaseToken() <= 0 {
		p = invalid("token", "give the lease token the claim returned")
	}
	if p != nil {
		writeProblem(w, p)
		return 0, false
	}
	return id, true
}

// refused reports whether the engine refused a worker's write about a
// task: a stale token, a lapsed lease, or a task that is gone.
func refused(err error) bool {
	return errors.Is(err, store.ErrLeaseLost) || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrRunFinished)
}

// recorded tells what a write about task id with token that the engine
// refused is. It returns nil when the write repeats one already recorded:
// the store kept the attempt the claim started with that token (the
// engine's ClaimTasks asks it to), and that attempt's event in its run's
// history is one that same says (a worker whose answer was lost sends its
// result again). Otherwise it returns reprise.ErrNotFound for a task that
// no claim handed out and that is no task now, or reprise.ErrLeaseLost.
// same is nil for a write that records nothing (a heartbeat).
func (a *api) recorded(ctx context.Context, id, token int64, same func(*store.Event) bool) error {
	attempts, err := a.st.TaskAttemptList(ctx, &store.TaskAttemptListParams{TaskID: id})
	if err != nil {
		return err
	}
	if len(attempts) == 0 {
		// No pull worker claimed it: a task of the engine's own, or none.
		if _, err := a.st.TaskGet(ctx, id); err != nil {
			return err // ErrNotFound for none
		}
		return store.ErrLeaseLost
	}
	for _, at := range attempts {
		if at.Token != token || same == nil {
			continue
		}
		events, err := a.st.HistoryList(ctx, &store.HistoryListParams{RunID: at.RunID})
		if err != nil {
			return err
		}
		for i := range events {
			e := &events[i]
			if e.Execution == at.Execution && e.Position == at.Position && e.Attempt == at.Attempt && same(e) {
				return nil
			}
		}
	}
	return store.ErrLeaseLost
}

// taskError answers an error about task id: 404 for a task that never
// was, 409 for a stale write.
func (a *api) taskError(w http.ResponseWriter, r *http.Request, id int64, err error) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeProblem(w, notFound("no task %d", id))
	case refused(err):
		a.metrics.leaseConflicts.Inc()
		writeProblem(w, &Problem{Type: ProblemLeaseLost, Title: "Conflict", Status: http.StatusConflict,
			Detail: fmt.Sprintf("task %d: the token is stale, the lease has lapsed, or the attempt ended with another result; "+
				"this one was not recorded", id)})
	default:
		a.internal(w, r, err)
	}
}

// sameJSON reports whether two JSON values are equal as JSON: compared
// in the canonical form of RFC 8785 (members in order, numbers as IEEE
// doubles print), since a store may keep a value in another form than it
// was sent in.
func sameJSON(x, y json.RawMessage) bool {
	cx, cy := jsontext.Value(bytes.Clone(x)), jsontext.Value(bytes.Clone(y))
	if cx.Canonicalize() != nil || cy.Canonicalize() != nil {
		return bytes.Equal(x, y)
	}
	return bytes.Equal(cx, cy)
}

// completeRequest is the body of POST /v1/tasks/{id}/complete.
type completeRequest struct {
	Token  int64           `json:"token"`
	Output json.RawMessage `json:"output"`
}

func (a *api) complete(w http.ResponseWriter, r *http.Request) {
	var req completeRequest
	id, ok := a.readTaskWrite(w, r, &req)
	if !ok {
		return
	}
	if len(req.Output) == 0 {
		req.Output = json.RawMessage("null")
	}
	err := a.e.CompleteTask(r.Context(), id, req.Token, req.Output)
	if err == nil {
		a.metrics.tasksCompleted.Inc()
	} else if refused(err) {
		// The same completion again, its first answer lost: the same answer.
		err = a.recorded(r.Context(), id, req.Token, func(e *store.Event) bool {
			return e.Type == store.EventStepCompleted && sameJSON(e.Output, req.Output)
		})
	}
	if err != nil {
		a.taskError(w, r, id, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "status": "completed"})
}

// failRequest is the body of POST /v1/tasks/{id}/fail.
type failRequest struct {
	Token int64            `json:"token"`
	Error *httpstep.Report `json:"error"`
}

func (a *api) fail(w http.ResponseWriter, r *http.Request) {
	var req failRequest
	id, ok := a.readTaskWrite(w, r, &req)
	if !ok {
		return
	}
	attemptErr, p := checkReport(req.Error)
	if p != nil {
		writeProblem(w, p)
		return
	}
	err := a.e.FailTask(r.Context(), id, req.Token, attemptErr)
	if err == nil {
		a.metrics.tasksFailed.Inc()
	} else if refused(err) {
		// The same failure again, its first answer lost: the same answer.
		err = a.recorded(r.Context(), id, req.Token, func(e *store.Event) bool {
			return e.Type == store.EventAttemptFailed && e.Error != nil &&
				e.Error.Type == req.Error.Type && e.Error.Message == req.Error.Message
		})
	}
	if err != nil {
		a.taskError(w, r, id, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "status": "failed"})
}

// checkReport turns a worker's error report into the attempt's error.
func checkReport(rep *httpstep.Report) (*retry.Error, *Problem) {
	switch {
	case rep == nil:
		return nil, invalid("error", `give the error: {"type", "message", "retryable", "retry_after_ms"}`)
	case rep.Type == "":
		return nil, invalid("error.type", "the error's type is empty; policies match on it")
	case rep.RetryAfterMS < 0:
		return nil, invalid("error.retry_after_ms", "retry_after_ms %d is negative", rep.RetryAfterMS)
	}
	err, cerr := httpstep.ErrorFromReport(*rep)
	if cerr != nil {
		return nil, invalid("error", "%v", cerr)
	}
	return err, nil
}

// heartbeatRequest is the body of POST /v1/tasks/{id}/heartbeat.
type heartbeatRequest struct {
	Token int64 `json:"token"`
}

func (a *api) heartbeat(w http.ResponseWriter, r *http.Request) {
	var req heartbeatRequest
	id, ok := a.readTaskWrite(w, r, &req)
	if !ok {
		return
	}
	t, err := a.e.HeartbeatTask(r.Context(), id, req.Token)
	if refused(err) {
		err = a.recorded(r.Context(), id, req.Token, nil)
	}
	if err != nil {
		a.taskError(w, r, id, err)
		return
	}
	a.metrics.heartbeats.Inc()
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "lease_until": t.LeaseUntil})
}
