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
	"reprise/internal/runfilter"
	"reprise/internal/runid"
	"reprise/store"
)

// The list's page sizes.
const (
	defaultLimit = 50
	maxLimit     = 200
)

// listParams are the parameters of the runs list: its filters
// (runfilter.Params), its page, and a run id to open.
var listParams = append([]string{"limit", "cursor", "id"}, runfilter.Params...)

// sincePresets are the choices of the form's time filter; the query also
// takes any Go duration or an RFC 3339 time, as until does.
var sincePresets = []struct{ Value, Label string }{
	{"15m", "last 15 minutes"}, {"1h", "last hour"}, {"24h", "last 24 hours"}, {"7d", "last 7 days"}, {"30d", "last 30 days"},
}

// listQuery is the runs list's query, read and checked.
type listQuery struct {
	runfilter.Filter
	Limit  int
	Cursor string
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
		switch {
		case !slices.Contains(listParams, name):
			return q, fmt.Errorf("unknown parameter %q; the list takes %s", name, strings.Join(listParams, ", "))
		case len(values[name]) > 1:
			return q, fmt.Errorf("parameter %q is given %d times; give it once", name, len(values[name]))
		}
	}
	if q.Filter, err = runfilter.Read(values, now); err != nil {
		return q, err
	}
	if s := values.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxLimit {
			return q, fmt.Errorf("limit %q is not a number from 1 to %d", s, maxLimit)
		}
		q.Limit = n
	}
	if q.Cursor = values.Get("cursor"); q.Cursor != "" {
		if err := runid.Check(q.Cursor); err != nil {
			return q, fmt.Errorf("cursor is not a run id: %w", err)
		}
	}
	return q, nil
}

// with returns the query's URL with one parameter changed ("" drops it).
func (q listQuery) with(name, value string) string {
	v := q.Values()
	if q.Limit != defaultLimit {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	v.Del(name)
	if value != "" {
		v.Set(name, value)
	}
	if len(v) == 0 {
		return "/"
	}
	return "/?" + v.Encode()
}

// A runItem is a row of the list.
type runItem struct {
	Run *store.Run
	// Next is the next attempt a retrying run's step waits for (from its
	// history).
	Next *planned
	// Waiting is the step an unfinished run waits for that no worker has
	// claimed for long.
	Waiting *reprise.Waiting
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
	Error string
	// SearchID is the id searched for that names no run.
	SearchID string
	Now      time.Time
}

func (h *Handler) listRuns(w http.ResponseWriter, r *http.Request) {
	if !h.requireSignIn(w, r) {
		return
	}
	now := h.cfg.Now()
	data := listData{Statuses: runfilter.Statuses, Since: sincePresets, Now: now}
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
	runs, next, err := h.page(r, q, now)
	if err != nil {
		h.internal(w, r, err)
		return
	}
	data.Runs = runs
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

// page lists the runs of a page, newest first from the cursor on, as the
// store filters them; next is the cursor of the next page, if there is
// one. Of the unfinished runs it shows, it reads what they wait for: a
// step no worker has claimed for long (one read of the run's tasks), and
// for those the store lists as retrying, the next attempt (their history;
// no other run's).
func (h *Handler) page(r *http.Request, q listQuery, now time.Time) (items []runItem, next string, err error) {
	ctx := r.Context()
	p := &store.RunListParams{Before: q.Cursor, Limit: q.Limit + 1}
	q.Apply(p)
	runs, err := h.cfg.Store.RunList(ctx, p)
	if err != nil {
		return nil, "", fmt.Errorf("list runs: %w", err)
	}
	if len(runs) > q.Limit {
		runs = runs[:q.Limit]
		next = runs[q.Limit-1].ID
	}
	retrying, err := h.retrying(r, q, runs)
	if err != nil {
		return nil, "", err
	}
	items = make([]runItem, len(runs))
	for i, run := range runs {
		items[i].Run = run
		if run.Status.Final() {
			continue
		}
		if items[i].Waiting, err = h.cfg.Engine.RunWaiting(ctx, run.ID); err != nil {
			return nil, "", fmt.Errorf("what run %s waits for: %w", run.ID, err)
		}
		if !retrying[run.ID] {
			continue
		}
		events, err := h.cfg.Engine.History(ctx, run.ID)
		if err != nil && !errors.Is(err, reprise.ErrNotFound) {
			return nil, "", fmt.Errorf("history of run %s: %w", run.ID, err)
		}
		items[i].Next = buildTimeline(events, now).Next
	}
	return items, next, nil
}

// retrying returns which of the runs of a page the store lists as
// retrying: all of them under that filter, else those of one more list,
// over the page's span of creation times, when any of them runs.
func (h *Handler) retrying(r *http.Request, q listQuery, runs []*store.Run) (map[string]bool, error) {
	set := make(map[string]bool)
	if q.Status == runfilter.Retrying {
		for _, run := range runs {
			set[run.ID] = true
		}
		return set, nil
	}
	if !slices.ContainsFunc(runs, func(run *store.Run) bool { return run.Status == store.RunRunning }) {
		return set, nil
	}
	p := &store.RunListParams{Retrying: true, Before: q.Cursor, CreatedSince: runs[len(runs)-1].CreatedAt,
		Limit: len(runs) + maxLimit}
	listed, err := h.cfg.Store.RunList(r.Context(), p)
	if err != nil {
		return nil, fmt.Errorf("list retrying runs: %w", err)
	}
	for _, run := range listed {
		set[run.ID] = true
	}
	return set, nil
}
