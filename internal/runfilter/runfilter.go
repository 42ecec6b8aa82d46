// Package runfilter reads the filters of a list of runs from a query
// string, as the HTTP API's GET /v1/runs and the web page's list take
// them, and says what is wrong with a bad one.
package runfilter

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"reprise/store"
)

// Retrying is the status filter of the running runs with a step that
// waits for its retry (store.RunListParams.Retrying).
const Retrying = "retrying"

// Statuses are the values of the status filter, in the order a form
// lists them.
var Statuses = []string{string(store.RunPending), string(store.RunRunning), Retrying,
	string(store.RunCompleted), string(store.RunFailed), string(store.RunCancelled)}

// Params are the query parameters the filters take.
var Params = []string{"status", "workflow", "step", "error_type", "since", "until"}

// maxName is the longest workflow, step or error type name a filter takes.
const maxName = 200

// A Filter is the filters of a list, as given, to show them again, and
// read.
type Filter struct {
	Status, Workflow, Step, ErrorType string
	// Since and Until are as given: a duration back from now or a time.
	Since, Until string
	since, until time.Time
}

// An Error is a bad filter: its parameter, and what it takes.
type Error struct {
	Param  string
	Reason string
}

func (e *Error) Error() string { return e.Reason }

// Read reads the filters of values, at now (for since and until given as
// durations). A filter given twice is an error, as is a bad value; values
// of other parameters are left to the caller.
func Read(values url.Values, now time.Time) (Filter, error) {
	var f Filter
	for _, name := range Params {
		if n := len(values[name]); n > 1 {
			return f, &Error{name, fmt.Sprintf("parameter %q is given %d times; give it once", name, n)}
		}
	}
	f.Status = values.Get("status")
	f.Workflow = strings.TrimSpace(values.Get("workflow"))
	f.Step = strings.TrimSpace(values.Get("step"))
	f.ErrorType = strings.TrimSpace(values.Get("error_type"))
	f.Since, f.Until = values.Get("since"), values.Get("until")
	if f.Status != "" && !slices.Contains(Statuses, f.Status) {
		return f, &Error{"status", fmt.Sprintf("status %q is not one of %s", f.Status, strings.Join(Statuses, ", "))}
	}
	for _, p := range []struct{ name, value string }{{"workflow", f.Workflow}, {"step", f.Step}, {"error_type", f.ErrorType}} {
		if len(p.value) > maxName {
			return f, &Error{p.name, fmt.Sprintf("%s is %d characters long; a name has at most %d", p.name, len(p.value), maxName)}
		}
	}
	var err error
	if f.since, err = readTime("since", f.Since, now); err != nil {
		return f, err
	}
	if f.until, err = readTime("until", f.Until, now); err != nil {
		return f, err
	}
	if !f.since.IsZero() && !f.until.IsZero() && !f.since.Before(f.until) {
		return f, &Error{"until", fmt.Sprintf("until (%s) is not after since (%s): no run can match",
			f.until.Format(time.RFC3339), f.since.Format(time.RFC3339))}
	}
	return f, nil
}

// readTime reads a time filter: empty for none, a duration back from now
// (a Go duration, or whole days as 7d), or an RFC 3339 time.
func readTime(name, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
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
	return time.Time{}, &Error{name, fmt.Sprintf(
		"%s %q is neither a duration back from now (like 90m, 24h or 7d) nor a time (like 2026-01-02T15:04:05Z)", name, s)}
}

// Apply sets p's filters to f's.
func (f Filter) Apply(p *store.RunListParams) {
	p.Status, p.Retrying = store.RunStatus(f.Status), f.Status == Retrying
	if p.Retrying {
		p.Status = ""
	}
	p.Workflow, p.Step, p.ErrorType = f.Workflow, f.Step, f.ErrorType
	p.CreatedSince, p.CreatedUntil = f.since, f.until
}

// Values returns f's parameters that are set, as given.
func (f Filter) Values() url.Values {
	v := url.Values{}
	for _, p := range [][2]string{{"status", f.Status}, {"workflow", f.Workflow}, {"step", f.Step},
		{"error_type", f.ErrorType}, {"since", f.Since}, {"until", f.Until}} {
		if p[1] != "" {
			v.Set(p[0], p[1])
		}
	}
	return v
}
