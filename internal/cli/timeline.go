package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"reprise/store"
)

// writeTimeline prints a run's history for a person: one line per event,
// times relative to the run's start, and for each failed attempt what the
// policy decided and why.
func writeTimeline(w io.Writer, run *store.Run, events []store.Event) {
	fmt.Fprintf(w, "run %s  workflow %s  %s", run.ID, run.Workflow, run.Status)
	if run.Status.Final() {
		fmt.Fprintf(w, " after %s", fmtDur(run.UpdatedAt.Sub(run.CreatedAt)))
	}
	fmt.Fprintln(w)
	if run.Error != nil {
		fmt.Fprintf(w, "error %s: %s\n", run.Error.Type, firstLine(run.Error.Message))
	}
	fmt.Fprintln(w)
	var start time.Time
	if len(events) > 0 {
		start = events[0].At
	}
	steps := map[int]string{}
	for _, ev := range events {
		if ev.Type == store.EventStepScheduled {
			steps[ev.Position] = ev.Step
		}
		rel := "+" + fmtDur(ev.At.Sub(start))
		fmt.Fprintf(w, "%10s  %s\n", rel, describe(ev, start, steps))
	}
}

// describe says what one event means.
func describe(ev store.Event, start time.Time, steps map[int]string) string {
	step := fmt.Sprintf("#%d %s", ev.Position, ev.Step)
	if ev.Step == "" {
		step = fmt.Sprintf("#%d %s", ev.Position, steps[ev.Position])
	}
	at := func(t time.Time) string { return "+" + fmtDur(t.Sub(start)) }
	switch ev.Type {
	case store.EventRunStarted:
		return fmt.Sprintf("run started         input %s", clip(string(ev.Input), 60))
	case store.EventStepScheduled:
		return fmt.Sprintf("step %s scheduled   policy %s  key %s", step, ev.Policy, clip(ev.IdempotencyKey, 12))
	case store.EventAttemptStarted:
		return fmt.Sprintf("  %s attempt %d started  (worker %s, lease until %s)", step, ev.Attempt, ev.Worker, at(ev.LeaseUntil))
	case store.EventAttemptFailed:
		s := fmt.Sprintf("  %s attempt %d failed   %s", step, ev.Attempt, errText(ev.Error))
		if !ev.RetryAt.IsZero() {
			return s + fmt.Sprintf("\n%12s→ retry in %s, at %s, by rule %s", "", fmtDur(ev.Delay), at(ev.RetryAt), ev.Rule)
		}
		why := ev.Reason
		if ev.Rule != "" {
			why += " by rule " + ev.Rule
		}
		return s + fmt.Sprintf("\n%12s→ stop: %s", "", why)
	case store.EventStepCompleted:
		return fmt.Sprintf("step %s completed on attempt %d  result %s", step, ev.Attempt, clip(string(ev.Output), 60))
	case store.EventStepFailed:
		return fmt.Sprintf("step %s FAILED (%s) after %d attempt(s): %s", step, ev.Reason, ev.Attempt, errText(ev.Error))
	case store.EventTimerScheduled:
		return fmt.Sprintf("timer #%d set for %s, fires at %s", ev.Position, fmtDur(ev.Delay), at(ev.FireAt))
	case store.EventTimerFired:
		return fmt.Sprintf("timer #%d fired", ev.Position)
	case store.EventRunCompleted:
		return fmt.Sprintf("run completed       output %s", clip(string(ev.Output), 60))
	case store.EventRunFailed:
		return fmt.Sprintf("run FAILED          %s", errText(ev.Error))
	case store.EventRunCancelled:
		return fmt.Sprintf("run cancelled       %s", ev.Reason)
	case store.EventRunRedriven:
		return fmt.Sprintf("run redriven by %s: step %s gets new attempts", ev.By, step)
	case store.EventSignalReceived:
		return fmt.Sprintf("signal %s received  payload %s", ev.Signal, clip(string(ev.Input), 60))
	case store.EventVersionMarker:
		return fmt.Sprintf("change %s at version %d", ev.Change, ev.Version)
	case store.EventChildStarted:
		return fmt.Sprintf("child #%d %s started  workflow %s", ev.Position, ev.Child, ev.Workflow)
	case store.EventChildCompleted:
		return fmt.Sprintf("child #%d %s completed  result %s", ev.Position, ev.Child, clip(string(ev.Output), 60))
	case store.EventChildFailed:
		return fmt.Sprintf("child #%d %s %s  %s", ev.Position, ev.Child, strings.ToUpper(string(ev.ChildStatus)), errText(ev.Error))
	}
	return string(ev.Type)
}

func errText(e *store.ErrorInfo) string {
	if e == nil {
		return ""
	}
	return e.Type + ": " + clip(firstLine(e.Message), 100)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
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
		return fmt.Sprintf("%.3fs", d.Seconds())
	}
	return d.Round(time.Second).String()
}
