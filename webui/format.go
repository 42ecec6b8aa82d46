package webui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"strings"
	"time"
)

// pageNames are the pages, each a template beside layout.html.
var pageNames = []string{"runs", "run", "confirm", "login", "error", "reopen"}

// parsePages parses each page with the layout.
func parsePages() (map[string]*template.Template, error) {
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("webui: parse layout: %w", err)
	}
	pages := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.Must(layout.Clone()).ParseFS(templateFS, "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("webui: parse page %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// funcs are the templates' functions.
var funcs = template.FuncMap{
	"dur":         fmtDur,
	"since":       func(a, b time.Time) time.Duration { return b.Sub(a) },
	"rel":         func(t, start time.Time) string { return "+" + fmtDur(t.Sub(start)) },
	"clock":       clock,
	"rfc3339":     func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
	"countdown":   countdown,
	"ago":         ago,
	"pct":         func(f float64) string { return fmt.Sprintf("%.3f%%", f) },
	"plus":        func(a, b float64) float64 { return a + b },
	"half":        func(f float64) float64 { return f / 2 },
	"json":        prettyJSON,
	"clip":        clip,
	"firstLine":   firstLine,
	"restLines":   restLines,
	"late":        late,
	"stepState":   stepState,
	"outcomeText": outcomeText,
	"reasonText":  reasonText,
	"trackLabel":  trackLabel,
}

// fmtDur prints a duration the way people read them: 1.204s, 250ms, 2m30s.
func fmtDur(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + fmtDur(-d)
	case d == 0:
		return "0s"
	case d < time.Millisecond:
		return d.String()
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", d.Seconds()), "0"), ".") + "s"
	}
	return d.Round(time.Second).String()
}

// clock prints a time in UTC to the millisecond.
func clock(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
}

// countdown says how long until t: "in 12s", or "due now" once passed.
// The page's script keeps it counting.
func countdown(t, now time.Time) string {
	d := t.Sub(now)
	if d <= 0 {
		return "due now"
	}
	return "in " + roughDur(d)
}

// ago says how long before now t was.
func ago(t, now time.Time) string {
	d := now.Sub(t)
	if d < time.Second {
		return "just now"
	}
	return roughDur(d) + " ago"
}

// roughDur rounds a duration for a glance: 12s, 4m10s, 3h5m, 2d4h.
func roughDur(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Round(time.Second)/time.Second))
	case d < time.Hour:
		return strings.TrimSuffix(d.Round(time.Second).String(), "0s")
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
	days := int(d / (24 * time.Hour))
	return fmt.Sprintf("%dd%dh", days, int((d-time.Duration(days)*24*time.Hour)/time.Hour))
}

// prettyJSON indents a JSON document; an empty one is null.
func prettyJSON(m json.RawMessage) string {
	if len(m) == 0 {
		return "null"
	}
	var b bytes.Buffer
	if err := json.Indent(&b, m, "", "  "); err != nil {
		return string(m)
	}
	return b.String()
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// restLines is s after its first line, trimmed.
func restLines(s string) string {
	_, rest, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(rest)
}

// late says how long after its planned time an attempt's successor
// started, when that is a millisecond or more.
func late(a *attempt) string {
	if a.NextStart.IsZero() || a.RetryAt.IsZero() {
		return ""
	}
	d := a.NextStart.Sub(a.RetryAt)
	if d < time.Millisecond {
		return ""
	}
	return fmtDur(d)
}

// stepState says where a step is, for its badge.
func stepState(r *row) string {
	n := len(r.Attempts)
	switch r.State {
	case stateCompleted:
		return fmt.Sprintf("completed on attempt %d", r.Attempts[n-1].Number)
	case stateFailed:
		if n == 0 {
			return "failed (" + r.Reason + ")"
		}
		return fmt.Sprintf("failed (%s) after attempt %d", r.Reason, r.Attempts[n-1].Number)
	case stateRunning:
		return fmt.Sprintf("running attempt %d", r.Attempts[n-1].Number)
	case stateRetrying:
		return fmt.Sprintf("retrying: attempt %d planned", r.Next.Attempt)
	case stateCancelled:
		return "cancelled (" + r.Reason + ")"
	case stateDropped:
		return "dropped when the run ended"
	}
	return r.State
}

// outcomeText says how an attempt ended.
func outcomeText(a *attempt) string {
	switch a.Outcome {
	case "ok":
		return "succeeded"
	case "timeout":
		return "timed out"
	case "lost":
		return "worker lost"
	case "deadline":
		return "deadline exceeded"
	case "panic":
		return "panicked"
	case "running":
		return "running"
	case "cut":
		return "cut off"
	}
	return "failed"
}

// reasonText says why a step stopped.
func reasonText(reason string) string {
	switch reason {
	case "exhausted":
		return "exhausted, no attempts left"
	case "permanent":
		return "permanent error"
	case "not_covered":
		return "not covered, no rule covers the error"
	case "deadline":
		return "deadline, the next retry would pass the step's deadline"
	case "poison":
		return "poison, its workers kept dying"
	}
	return reason
}

// trackLabel describes a row's track for a screen reader; the list under
// it has the details.
func trackLabel(r *row, x *execution) string {
	switch r.Kind {
	case kindStep:
		n := len(r.Attempts)
		if n == 0 {
			return "no attempt yet"
		}
		s := fmt.Sprintf("%d attempt", n)
		if n > 1 {
			s += "s"
		}
		to := "now"
		if last := r.Attempts[n-1]; !last.Running {
			to = "+" + fmtDur(last.End.Sub(x.Start))
		}
		return fmt.Sprintf("%s, from +%s to %s", s, fmtDur(r.Attempts[0].Start.Sub(x.Start)), to)
	case kindTimer:
		return "timer of " + fmtDur(r.Delay)
	case kindChild:
		return "child run, " + r.State
	}
	return "at +" + fmtDur(r.Start.Sub(x.Start))
}
