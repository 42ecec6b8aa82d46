package webui

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"reprise"
	"reprise/internal/runid"
	"reprise/store"
)

// The list's page sizes, and how many runs one request reads at most to
// fill a page whose filter the store cannot apply (retrying).
const (
	defaultLimit = 50
	maxLimit     = 200
	maxScan      = 500
)

// statusRetrying is the list's filter for running runs that have a step
// waiting for its next attempt. The store has no such status: the page
// reads the history of each running run it lists to find them.
const statusRetrying = "retrying"

// A filter is one control of the runs list. A filter the store applies
// sets RunListParams; one it cannot (Pending) is refused with a reason,
// so that a link made for a later version says why it does not work
// here. Adding the filters by step and error type means a field of
// RunListParams that every store implements, and one entry here.
type filter struct {
	Param string
	// Pending, when set, says why the filter is not available yet.
	Pending string
}

var filters = []filter{
	{Param: "status"},
	{Param: "workflow"},
	{Param: "since"},
	{Param: "limit"},
	{Param: "cursor"},
	{Param: "id"},
	{Param: "step", Pending: "filtering runs by step needs the store to index the steps of each run, which it does not yet"},
	{Param: "error_type", Pending: "filtering runs by error type needs the store to index the errors of each run's attempts, which it does not yet"},
}

// statuses are the values of the status filter, in the order the form
// lists them.
var statuses = []string{string(store.RunPending), string(store.RunRunning), statusRetrying,
	string(store.RunCompleted), string(store.RunFailed), string(store.RunCancelled)}

// sincePresets are the choices of the form's time filter; the query also
// takes any Go duration or an RFC 3339 time.
var sincePresets = []struct{ Value, Label string }{
	{"15m", "last 15 minutes"}, {"1h", "last hour"}, {"24h", "last 24 hours"}, {"7d", "last 7 days"}, {"30d", "last 30 days"},
}

// listQuery is the runs list's query, read and checked.
type listQuery struct {
	Status   string
	Workflow string
	Since    string    // as given
	since    time.Time // zero: any time
	Limit    int
	Cursor   string
}

// readListQuery reads the query of the runs list. An error names the
// parameter at fault and says what it takes.
func readListQuery(raw string, now time.Time) (listQuery, error) {
	q := listQuery{Limit: defaultLimit}
	values, err := url.ParseQuery(raw)
	if err != nil {
		return q, fmt.Errorf("the query string is malformed: %w", err)
	}
	var names []string
	for name := range values {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		i := slices.IndexFunc(filters, func(f filter) bool { return f.Param == name })
		switch {
		case i < 0:
			var known []string
			for _, f := range filters {
				if f.Pending == "" {
					known = append(known, f.Param)
				}
			}
			return q, fmt.Errorf("unknown parameter %q; the list takes %s", name, strings.Join(known, ", "))
		case filters[i].Pending != "":
			return q, fmt.Errorf("parameter %q is not available yet: %s", name, filters[i].Pending)
		case len(values[name]) > 1:
			return q, fmt.Errorf("parameter %q is given %d times; give it once", name, len(values[name]))
		}
	}
	q.Status, q.Workflow, q.Since, q.Cursor = values.Get("status"), strings.TrimSpace(values.Get("workflow")), values.Get("since"), values.Get("cursor")
	if q.Status != "" && !slices.Contains(statuses, q.Status) {
		return q, fmt.Errorf("status %q is not one of %s", q.Status, strings.Join(statuses, ", "))
	}
	if len(q.Workflow) > 200 {
		return q, fmt.Errorf("workflow is %d characters long; a name has at most 200", len(q.Workflow))
	}
	if s := values.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxLimit {
			return q, fmt.Errorf("limit %q is not a number from 1 to %d", s, maxLimit)
		}
		q.Limit = n
	}
	if q.Cursor != "" {
		if err := runid.Check(q.Cursor); err != nil {
			return q, fmt.Errorf("cursor is not a run id: %w", err)
		}
	}
	if q.Since != "" {
		t, err := parseSince(q.Since, now)
		if err != nil {
			return q, err
		}
		q.since = t
	}
	return q, nil
}

// parseSince reads the time filter: a duration back from now (a Go
// duration, or whole days as 7d), or an RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n > 0 && n <= 3650 {
			return now.AddDate(0, 0, -n), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("since %q is neither a duration back from now (like 90m, 24h or 7d) nor a time (like 2026-01-02T15:04:05Z)", s)
}

// with returns the query's URL with one parameter changed ("" drops it).
func (q listQuery) with(name, value string) string {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("status", q.Status)
	set("workflow", q.Workflow)
	set("since", q.Since)
	if q.Limit != defaultLimit {
		set("limit", strconv.Itoa(q.Limit))
	}
	set("cursor", q.Cursor)
	v.Del(name)
	set(name, value)
	if len(v) == 0 {
		return "/"
	}
	return "/?" + v.Encode()
}

// A runItem is a row of the list.
type runItem struct {
	Run *store.Run
	// Next is the next attempt a running run's step waits for, if any
	// (from its history).
	Next *planned
}

// listData is the data of the runs list.
type listData struct {
	Query    listQuery
	Statuses []string
	Since    []struct{ Value, Label string }
	Runs     []runItem
	// Next is the link to the next page, if there may be one.
	Next string
	// First is the link to the first page, when this one is not.
	First string
	// Scanned says how many runs a filter the store cannot apply read
	// without filling the page, when it stopped at maxScan.
	Scanned int
	Error   string
	// SearchID is the id searched for that names no run.
	SearchID string
	Now      time.Time
}

func (h *Handler) listRuns(w http.ResponseWriter, r *http.Request) {
	if !h.requireSignIn(w, r) {
		return
	}
	now := h.cfg.Now()
	data := listData{Statuses: statuses, Since: sincePresets, Now: now}
	q, err := readListQuery(r.URL.RawQuery, now)
	data.Query = q
	if err != nil {
		data.Error = err.Error()
		h.render(w, r, http.StatusBadRequest, "runs", "Runs", data)
		return
	}
	if id := strings.TrimSpace(r.URL.Query().Get("id")); id != "" {
		h.findRun(w, r, id, data)
		return
	}
	runs, next, scanned, err := h.scan(r, q, now)
	if err != nil {
		h.internal(w, r, err)
		return
	}
	data.Runs, data.Scanned = runs, scanned
	if next != "" {
		data.Next = q.with("cursor", next)
	}
	if q.Cursor != "" {
		data.First = q.with("cursor", "")
	}
	h.render(w, r, http.StatusOK, "runs", "Runs", data)
}

// findRun opens the run searched for by id, or says there is none.
func (h *Handler) findRun(w http.ResponseWriter, r *http.Request, id string, data listData) {
	if err := runid.Check(id); err != nil {
		data.Error = fmt.Sprintf("no run can have the id %q: %v", id, err)
		h.render(w, r, http.StatusBadRequest, "runs", "Runs", data)
		return
	}
	_, err := h.cfg.Engine.GetRun(r.Context(), id)
	switch {
	case errors.Is(err, reprise.ErrNotFound):
		data.SearchID = id
		h.render(w, r, http.StatusNotFound, "runs", "Runs", data)
	case err != nil:
		h.internal(w, r, err)
	default:
		http.Redirect(w, r, runPath(id), http.StatusSeeOther)
	}
}

// scan lists the runs of a page: newest first, from the cursor on. The
// store filters by status and workflow; the page stops at the first run
// created before since, and, for retrying, keeps the running runs whose
// history has a step waiting for its next attempt, reading at most
// maxScan runs. next is the cursor of the next page, if there may be
// one; scanned is set when the page stopped at maxScan unfilled.
func (h *Handler) scan(r *http.Request, q listQuery, now time.Time) (items []runItem, next string, scanned int, err error) {
	ctx := r.Context()
	p := &store.RunListParams{Status: store.RunStatus(q.Status), Workflow: q.Workflow, Before: q.Cursor}
	retrying := q.Status == statusRetrying
	if retrying {
		p.Status = store.RunRunning
	}
	batch := q.Limit + 1
	if retrying {
		batch = min(max(batch, 100), maxScan)
	}
	read := 0
	for {
		p.Limit = batch
		runs, err := h.cfg.Store.RunList(ctx, p)
		if err != nil {
			return nil, "", 0, fmt.Errorf("list runs: %w", err)
		}
		for _, run := range runs {
			read++
			if !q.since.IsZero() && run.CreatedAt.Before(q.since) {
				return items, "", 0, nil
			}
			item := runItem{Run: run}
			if !run.Status.Final() {
				events, err := h.cfg.Engine.History(ctx, run.ID)
				if err != nil && !errors.Is(err, reprise.ErrNotFound) {
					return nil, "", 0, fmt.Errorf("history of run %s: %w", run.ID, err)
				}
				item.Next = buildTimeline(events, now).Next
			}
			if retrying && item.Next == nil {
				continue
			}
			if len(items) == q.Limit {
				return items, items[q.Limit-1].Run.ID, 0, nil
			}
			items = append(items, item)
		}
		if len(runs) < batch {
			return items, "", 0, nil
		}
		p.Before = runs[len(runs)-1].ID
		if read >= maxScan {
			return items, p.Before, read, nil
		}
	}
}
