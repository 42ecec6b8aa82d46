package webui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"reprise"
	"reprise/internal/runid"
	"reprise/internal/strictjson"
	"reprise/store"
)

// runData is the data of a run's page.
type runData struct {
	Run      *store.Run
	Timeline *timeline
	// Waiting is the step the run waits for that no worker has claimed
	// for long, while it runs.
	Waiting *reprise.Waiting
	Now     time.Time
	// Notice says what an action just did; Error why one was refused.
	Notice string
	Error  string
	// Actions are the actions the run's state allows.
	CanCancel, CanRedrive, CanSignal bool
}

// notices are the messages of the notice parameter, which an action's
// redirect sets.
var notices = map[string]string{
	"cancelled": "The run was cancelled.",
	"redriven":  "The run was redriven: its failed step runs again with a fresh budget of attempts.",
	"signalled": "The signal was sent.",
}

// The pages of a run are under /runs/ID, where a child run's ID has its
// parent's, a slash, and its place (order-1/2, or order-1/e2/3 in the
// parent's second execution): /runs/ID is the run, and /runs/ID/ACTION
// its stream (live) and its actions.
func (h *Handler) runGet(w http.ResponseWriter, r *http.Request) {
	id, action := runid.Split(r.PathValue("path"), runActions...)
	switch action {
	case "":
		h.showRun(w, r, id)
	case "live":
		h.live(w, r, id)
	default:
		h.confirmAction(w, r, id, action)
	}
}

func (h *Handler) runPost(w http.ResponseWriter, r *http.Request) {
	id, action := runid.Split(r.PathValue("path"), runActions...)
	if action == "" || action == "live" {
		w.Header().Set("Allow", "GET, HEAD")
		h.fail(w, r, http.StatusMethodNotAllowed, "Method not allowed", "This page takes no POST; its actions are under it.")
		return
	}
	h.doAction(w, r, id, action)
}

// runActions are what may follow a run's id under /runs/: its stream and
// its actions.
var runActions = []string{"live", "cancel", "redrive", "signal"}

// runPath is the path of a run's page.
func runPath(id string) string { return "/runs/" + id }

// readRun reads run id, answering a bad id (400) or none (404) itself.
func (h *Handler) readRun(w http.ResponseWriter, r *http.Request, id string) (*store.Run, bool) {
	if err := runid.Check(id); err != nil {
		h.fail(w, r, http.StatusBadRequest, "Bad run id", fmt.Sprintf("%q is not a run id: %v.", id, err))
		return nil, false
	}
	run, err := h.cfg.Engine.GetRun(r.Context(), id)
	switch {
	case errors.Is(err, reprise.ErrNotFound):
		h.fail(w, r, http.StatusNotFound, "No such run", fmt.Sprintf("There is no run %q.", id))
		return nil, false
	case err != nil:
		h.internal(w, r, err)
		return nil, false
	}
	return run, true
}

func (h *Handler) showRun(w http.ResponseWriter, r *http.Request, id string) {
	if !h.requireSignIn(w, r) {
		return
	}
	q := r.URL.Query()
	for name := range q {
		if name != "notice" {
			h.fail(w, r, http.StatusBadRequest, "Bad query", fmt.Sprintf("Unknown parameter %q: a run's page takes only notice.", name))
			return
		}
	}
	notice := ""
	if n := q.Get("notice"); n != "" {
		var ok bool
		if notice, ok = notices[n]; !ok {
			h.fail(w, r, http.StatusBadRequest, "Bad query", fmt.Sprintf("notice %q is not one of cancelled, redriven, signalled.", n))
			return
		}
	}
	h.renderRun(w, r, id, http.StatusOK, notice, "")
}

// renderRun renders run id with a notice or an error.
func (h *Handler) renderRun(w http.ResponseWriter, r *http.Request, id string, status int, notice, problem string) {
	run, ok := h.readRun(w, r, id)
	if !ok {
		return
	}
	events, err := h.cfg.Engine.History(r.Context(), run.ID)
	if err != nil {
		h.internal(w, r, err)
		return
	}
	now := h.cfg.Now()
	data := runData{Run: run, Timeline: buildTimeline(events, now), Now: now, Notice: notice, Error: problem}
	if !run.Status.Final() {
		if data.Waiting, err = h.cfg.Engine.RunWaiting(r.Context(), run.ID); err != nil {
			h.internal(w, r, err)
			return
		}
	}
	data.CanCancel = !run.Status.Final()
	data.CanSignal = !run.Status.Final()
	data.CanRedrive = redrivable(run)
	h.render(w, r, status, "run", "Run "+run.ID, data)
}

// redrivable reports whether run failed because a step failed, which is
// what a redrive needs.
func redrivable(run *store.Run) bool {
	return run.Status == store.RunFailed && run.Error != nil && run.Error.Step != ""
}

// actionData is the data of an action's confirmation.
type actionData struct {
	Run    *store.Run
	Action string
	// Allowed is false when the run's state does not allow the action;
	// Why says so.
	Allowed bool
	Why     string
	// The form's fields, as posted, when they must be corrected.
	Reason, By, Name, Payload string
	Error                     string
}

// actionTitles are the actions of the run page, by the path's {action}.
var actionTitles = map[string]string{"cancel": "Cancel run", "redrive": "Redrive run", "signal": "Send a signal"}

// confirmAction shows an action's form: what it does, and a button to
// confirm it.
func (h *Handler) confirmAction(w http.ResponseWriter, r *http.Request, id, action string) {
	title, ok := actionTitles[action]
	if !ok {
		h.fail(w, r, http.StatusNotFound, "Not found", "There is no page at "+r.URL.Path+".")
		return
	}
	if !h.requireSignIn(w, r) {
		return
	}
	if r.URL.RawQuery != "" {
		h.fail(w, r, http.StatusBadRequest, "Bad query", "This page takes no parameters.")
		return
	}
	run, ok := h.readRun(w, r, id)
	if !ok {
		return
	}
	h.render(w, r, http.StatusOK, "confirm", title+" "+run.ID, allowed(actionData{Run: run, Action: action}))
}

// allowed fills in whether d's action applies to its run.
func allowed(d actionData) actionData {
	d.Allowed = true
	switch {
	case d.Action == "redrive" && !redrivable(d.Run):
		d.Allowed, d.Why = false, "Only a run that failed because a step failed for good can be redriven; this one is "+string(d.Run.Status)+"."
	case d.Action != "redrive" && d.Run.Status.Final():
		d.Allowed, d.Why = false, "The run has finished ("+string(d.Run.Status)+"): it can no longer be cancelled or signalled."
	}
	return d
}

// maxPayload bounds a signal's payload given in the form; the rest of an
// action's fields have the engine's bounds (reprise.MaxSignalName,
// MaxReason).
const maxPayload = 64 << 10

// doAction carries out a confirmed action, and goes back to the run's
// page, which says what was done.
func (h *Handler) doAction(w http.ResponseWriter, r *http.Request, id, action string) {
	if _, ok := actionTitles[action]; !ok {
		h.fail(w, r, http.StatusNotFound, "Not found", "There is no page at "+r.URL.Path+".")
		return
	}
	if !h.checkPost(w, r) {
		return
	}
	if err := runid.Check(id); err != nil {
		h.fail(w, r, http.StatusBadRequest, "Bad run id", fmt.Sprintf("%q is not a run id: %v.", id, err))
		return
	}
	f := actionData{Action: action, Reason: strings.TrimSpace(r.PostFormValue("reason")), By: strings.TrimSpace(r.PostFormValue("by")),
		Name: strings.TrimSpace(r.PostFormValue("name")), Payload: strings.TrimSpace(r.PostFormValue("payload"))}
	if msg := f.check(); msg != "" {
		f.Error = msg
		run, ok := h.readRun(w, r, id)
		if !ok {
			return
		}
		f.Run = run
		h.render(w, r, http.StatusBadRequest, "confirm", actionTitles[action]+" "+id, allowed(f))
		return
	}
	ctx := r.Context()
	var err error
	var notice string
	switch action {
	case "cancel":
		reason := f.Reason
		if reason == "" {
			reason = "cancelled from the web page"
		}
		err, notice = h.cfg.Engine.CancelRun(ctx, id, reason), "cancelled"
	case "redrive":
		by := f.By
		if by == "" {
			by = "the web page"
		}
		err, notice = h.cfg.Engine.RedriveRun(ctx, id, by), "redriven"
	case "signal":
		payload := json.RawMessage("null")
		if f.Payload != "" {
			payload = json.RawMessage(f.Payload)
		}
		err, notice = h.cfg.Engine.SignalRun(ctx, id, f.Name, payload), "signalled"
	}
	switch {
	case err == nil:
		http.Redirect(w, r, runPath(id)+"?notice="+notice, http.StatusSeeOther)
	case errors.Is(err, reprise.ErrNotFound):
		h.fail(w, r, http.StatusNotFound, "No such run", fmt.Sprintf("There is no run %q.", id))
	case errors.Is(err, reprise.ErrRunFinished):
		h.renderRun(w, r, id, http.StatusConflict, "", "The run has already finished: nothing was done.")
	case errors.Is(err, reprise.ErrNotRedrivable):
		h.renderRun(w, r, id, http.StatusConflict, "", "The run did not fail because a step failed: it cannot be redriven.")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		h.fail(w, r, http.StatusServiceUnavailable, "Unavailable", "The server is stopping; try again.")
	default:
		h.internal(w, r, err)
	}
}

// check validates an action's fields, returning what is wrong.
func (d *actionData) check() string {
	switch {
	case !utf8.ValidString(d.Reason+d.By+d.Name+d.Payload) || strings.ContainsRune(d.Reason+d.By+d.Name+d.Payload, 0):
		return "The form holds text that is not valid UTF-8, or a NUL."
	case len(d.Reason) > reprise.MaxReason:
		return fmt.Sprintf("The reason has %d characters; give at most %d.", len(d.Reason), reprise.MaxReason)
	case len(d.By) > reprise.MaxReason:
		return fmt.Sprintf("Who redrives has %d characters; give at most %d.", len(d.By), reprise.MaxReason)
	case d.Action != "signal":
		return ""
	case d.Name == "":
		return "Give the signal's name: the name the workflow waits for (reprise.WaitSignal)."
	case len(d.Name) > reprise.MaxSignalName:
		return fmt.Sprintf("The signal's name has %d characters; give at most %d.", len(d.Name), reprise.MaxSignalName)
	case len(d.Payload) > maxPayload:
		return fmt.Sprintf("The payload has %d bytes; give at most %d.", len(d.Payload), maxPayload)
	case d.Payload != "":
		if err := strictjson.Check([]byte(d.Payload)); err != nil {
			return fmt.Sprintf(`The payload is not JSON as the API takes it (%v): give a JSON value, such as {"approved": true}, "yes" or 42, or leave it empty for null.`, err)
		}
	}
	return ""
}
