package webui

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"reprise/internal/runid"
	"reprise/store"
)

var t0 = time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)

// ms is t0 plus n milliseconds.
func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// history numbers events from 1 and sets their execution to 1 unless set.
func history(events ...store.Event) []store.Event {
	for i := range events {
		events[i].Seq = int64(i + 1)
		if events[i].Execution == 0 {
			events[i].Execution = 1
		}
	}
	return events
}

func netErr() *store.ErrorInfo { return &store.ErrorInfo{Type: "NetworkError", Message: "reset"} }

// describeTimeline prints what a timeline holds, for exact comparisons.
func describeTimeline(tl *timeline) string {
	var b strings.Builder
	fmt.Fprintf(&b, "final=%v", tl.Final)
	if tl.Next != nil {
		fmt.Fprintf(&b, " next=%s#%d@%s", tl.Next.Step, tl.Next.Attempt, tl.Next.At.Sub(t0))
	}
	for _, x := range tl.Executions {
		fmt.Fprintf(&b, "\nexec %d %s..%s", x.Number, x.Start.Sub(t0), x.End.Sub(t0))
		for _, r := range x.Rows {
			fmt.Fprintf(&b, "\n  %s #%d %s %s", r.Kind, r.Position, r.Name, r.State)
			for _, a := range r.Attempts {
				end := a.End.Sub(t0).String()
				if a.Running {
					end = "now"
				}
				fmt.Fprintf(&b, "\n    %d %s %s..%s", a.Number, a.Outcome, a.Start.Sub(t0), end)
				if a.Retry {
					fmt.Fprintf(&b, " retry %s by %s", a.Delay, a.Rule)
					if !a.NextStart.IsZero() {
						fmt.Fprintf(&b, " next@%s", a.NextStart.Sub(t0))
					}
				} else if a.Reason != "" {
					fmt.Fprintf(&b, " stop %s", a.Reason)
				}
			}
			for _, l := range forecastLines(r.Forecast) {
				fmt.Fprintf(&b, "\n    forecast %s", l)
			}
		}
	}
	return b.String()
}

func forecastLines(f *forecast) []string {
	if f == nil {
		return nil
	}
	var out []string
	for _, l := range f.Lines {
		if l.Retry {
			out = append(out, fmt.Sprintf("%d retry %s @%s", l.Attempt, l.Delay, l.At.Sub(t0)))
		} else {
			out = append(out, fmt.Sprintf("%d stop %s", l.Attempt, l.Reason))
		}
	}
	return out
}

func TestBuildTimeline(t *testing.T) {
	t.Parallel()
	const rule = "[retry: 3, backoff: 200ms]"
	tests := []struct {
		name   string
		events []store.Event
		now    time.Time
		want   string
	}{{
		name: "failed twice, then succeeded",
		events: history(
			store.Event{Type: store.EventRunStarted, At: ms(0)},
			store.Event{Type: store.EventStepScheduled, At: ms(1), Position: 1, Step: "reserve", Policy: rule},
			store.Event{Type: store.EventAttemptStarted, At: ms(1), Position: 1, Step: "reserve", Attempt: 1},
			store.Event{Type: store.EventAttemptFailed, At: ms(3), Position: 1, Attempt: 1, Error: netErr(),
				Delay: 200 * time.Millisecond, RetryAt: ms(203), Rule: rule},
			store.Event{Type: store.EventAttemptStarted, At: ms(204), Position: 1, Step: "reserve", Attempt: 2},
			store.Event{Type: store.EventAttemptFailed, At: ms(500), Position: 1, Attempt: 2,
				Error: &store.ErrorInfo{Type: "Timeout"}, Delay: 400 * time.Millisecond, RetryAt: ms(900), Rule: rule},
			store.Event{Type: store.EventAttemptStarted, At: ms(901), Position: 1, Step: "reserve", Attempt: 3},
			store.Event{Type: store.EventStepCompleted, At: ms(950), Position: 1, Attempt: 3},
			store.Event{Type: store.EventRunCompleted, At: ms(951)},
		),
		now: ms(5000),
		want: `final=true
exec 1 0s..951ms
  step #1 reserve completed
    1 error 1ms..3ms retry 200ms by [retry: 3, backoff: 200ms] next@204ms
    2 timeout 204ms..500ms retry 400ms by [retry: 3, backoff: 200ms] next@901ms
    3 ok 901ms..950ms`,
	}, {
		name: "waiting for a retry, with what the policy decides next",
		events: history(
			store.Event{Type: store.EventRunStarted, At: ms(0)},
			store.Event{Type: store.EventStepScheduled, At: ms(0), Position: 1, Step: "charge", Policy: rule},
			store.Event{Type: store.EventAttemptStarted, At: ms(0), Position: 1, Step: "charge", Attempt: 1},
			store.Event{Type: store.EventAttemptFailed, At: ms(100), Position: 1, Attempt: 1, Error: netErr(),
				Delay: 200 * time.Millisecond, RetryAt: ms(300), Rule: rule},
		),
		now: ms(150),
		want: `final=false next=charge#2@300ms
exec 1 0s..300ms
  step #1 charge retrying
    1 error 0s..100ms retry 200ms by [retry: 3, backoff: 200ms]
    forecast 2 retry 400ms @700ms
    forecast 3 retry 800ms @1.5s
    forecast 4 stop exhausted`,
	}, {
		name: "a lost worker, a permanent error, and a step that lost a select",
		events: history(
			store.Event{Type: store.EventRunStarted, At: ms(0)},
			store.Event{Type: store.EventStepScheduled, At: ms(0), Position: 1, Step: "a", Policy: rule},
			store.Event{Type: store.EventStepScheduled, At: ms(0), Position: 2, Step: "b", Policy: rule},
			store.Event{Type: store.EventAttemptStarted, At: ms(1), Position: 1, Step: "a", Attempt: 1},
			store.Event{Type: store.EventAttemptStarted, At: ms(1), Position: 2, Step: "b", Attempt: 1},
			store.Event{Type: store.EventAttemptFailed, At: ms(30), Position: 1, Attempt: 1,
				Error: &store.ErrorInfo{Type: "WorkerLost"}, Delay: 0, RetryAt: ms(30), Rule: rule},
			store.Event{Type: store.EventAttemptFailed, At: ms(40), Position: 1, Attempt: 2,
				Error: &store.ErrorInfo{Type: "CardDeclined"}, Reason: "permanent"},
			store.Event{Type: store.EventStepFailed, At: ms(40), Position: 1, Attempt: 2, Reason: "permanent"},
			store.Event{Type: store.EventStepCancelRequested, At: ms(41), Position: 2, Step: "b"},
			store.Event{Type: store.EventRunFailed, At: ms(42)},
		),
		now: ms(100),
		want: `final=true
exec 1 0s..42ms
  step #1 a failed
    1 lost 1ms..30ms retry 0s by [retry: 3, backoff: 200ms] next@30ms
    2 error 30ms..40ms stop permanent
  step #2 b cancelled
    1 cut 1ms..41ms`,
	}, {
		name: "timers, signals, children and a marker in place; a cancel cuts the running attempt",
		events: history(
			store.Event{Type: store.EventRunStarted, At: ms(0)},
			store.Event{Type: store.EventTimerScheduled, At: ms(0), Position: 1, Delay: time.Second, FireAt: ms(1000)},
			store.Event{Type: store.EventSignalReceived, At: ms(500), Signal: "approve"},
			store.Event{Type: store.EventTimerFired, At: ms(1001), Position: 1},
			store.Event{Type: store.EventVersionMarker, At: ms(1001), Position: 2, Change: "new-tax", Version: 2},
			store.Event{Type: store.EventChildStarted, At: ms(1002), Position: 3, Workflow: "ship", Child: "r/3"},
			store.Event{Type: store.EventChildFailed, At: ms(1100), Position: 3, Child: "r/3", ChildStatus: "cancelled"},
			store.Event{Type: store.EventStepScheduled, At: ms(1100), Position: 4, Step: "notify", Policy: rule},
			store.Event{Type: store.EventAttemptStarted, At: ms(1101), Position: 4, Step: "notify", Attempt: 1},
			store.Event{Type: store.EventRunCancelled, At: ms(1200), Reason: "by hand"},
		),
		now: ms(2000),
		want: `final=true
exec 1 0s..1.2s
  timer #1  fired
  signal #0 approve received
  marker #2 new-tax recorded
  child #3 ship cancelled
  step #4 notify dropped
    1 cut 1.101s..1.2s`,
	}, {
		name: "redriven: the forecast counts from the redrive",
		events: history(
			store.Event{Type: store.EventRunStarted, At: ms(0)},
			store.Event{Type: store.EventStepScheduled, At: ms(0), Position: 1, Step: "s", Policy: "[retry: 1]"},
			store.Event{Type: store.EventAttemptStarted, At: ms(0), Position: 1, Step: "s", Attempt: 1},
			store.Event{Type: store.EventAttemptFailed, At: ms(10), Position: 1, Attempt: 1, Error: netErr(), Reason: "exhausted", Rule: "[retry: 1]"},
			store.Event{Type: store.EventStepFailed, At: ms(10), Position: 1, Attempt: 1, Reason: "exhausted"},
			store.Event{Type: store.EventRunFailed, At: ms(11)},
			store.Event{Type: store.EventRunRedriven, At: ms(500), Position: 1, Step: "s", By: "alice"},
			store.Event{Type: store.EventAttemptStarted, At: ms(600), Position: 1, Step: "s", Attempt: 2},
		),
		now: ms(700),
		want: `final=false
exec 1 0s..700ms
  step #1 s running
    1 error 0s..10ms stop exhausted
    2 running 600ms..now
    forecast 2 retry 1s @1.7s
    forecast 3 stop exhausted`,
	}, {
		name: "continued as new: one section per execution",
		events: history(
			store.Event{Type: store.EventRunStarted, At: ms(0)},
			store.Event{Type: store.EventTimerScheduled, At: ms(0), Position: 1, Delay: 10 * time.Millisecond, FireAt: ms(10)},
			store.Event{Type: store.EventRunContinuedAsNew, At: ms(5)},
			store.Event{Type: store.EventRunStarted, At: ms(5), Execution: 2},
			store.Event{Type: store.EventRunCompleted, At: ms(9), Execution: 2},
		),
		now: ms(100),
		want: `final=true
exec 1 0s..5ms
  timer #1  dropped
exec 2 5ms..9ms`,
	}, {
		name: "an attempt without its start in the history starts where its retry was planned",
		events: history(
			store.Event{Type: store.EventRunStarted, At: ms(0)},
			store.Event{Type: store.EventStepScheduled, At: ms(0), Position: 1, Step: "s", Policy: rule},
			store.Event{Type: store.EventAttemptStarted, At: ms(0), Position: 1, Step: "s", Attempt: 1},
			store.Event{Type: store.EventAttemptFailed, At: ms(10), Position: 1, Attempt: 1, Error: netErr(), RetryAt: ms(20), Delay: 10 * time.Millisecond, Rule: rule},
			store.Event{Type: store.EventStepCompleted, At: ms(25), Position: 1, Attempt: 2},
			store.Event{Type: store.EventRunCompleted, At: ms(26)},
		),
		now: ms(100),
		want: `final=true
exec 1 0s..26ms
  step #1 s completed
    1 error 0s..10ms retry 10ms by [retry: 3, backoff: 200ms] next@20ms
    2 ok 20ms..25ms`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := describeTimeline(buildTimeline(tt.events, tt.now)); got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

// The bars are placed on the execution's axis, in percent, and the gap
// of a retry runs from the failure to the next attempt's start.
func TestTimelineLayout(t *testing.T) {
	t.Parallel()
	tl := buildTimeline(history(
		store.Event{Type: store.EventRunStarted, At: ms(0)},
		store.Event{Type: store.EventStepScheduled, At: ms(0), Position: 1, Step: "s"},
		store.Event{Type: store.EventAttemptStarted, At: ms(0), Position: 1, Step: "s", Attempt: 1},
		store.Event{Type: store.EventAttemptFailed, At: ms(100), Position: 1, Attempt: 1, Error: netErr(), RetryAt: ms(600), Delay: 500 * time.Millisecond},
		store.Event{Type: store.EventAttemptStarted, At: ms(600), Position: 1, Step: "s", Attempt: 2},
		store.Event{Type: store.EventStepCompleted, At: ms(1000), Position: 1, Attempt: 2},
		store.Event{Type: store.EventRunCompleted, At: ms(1000)},
	), ms(5000))
	a := tl.Executions[0].Rows[0].Attempts
	near := func(got, want float64) bool { return got > want-0.001 && got < want+0.001 }
	if !near(a[0].Bar.X, 0) || !near(a[0].Bar.W, 10) || !near(a[0].Gap.X, 10) || !near(a[0].Gap.W, 50) || !a[0].Gap.Label ||
		!near(a[1].Bar.X, 60) || !near(a[1].Bar.W, 40) {
		t.Errorf("bars %+v %+v, gap %+v", a[0].Bar, a[1].Bar, a[0].Gap)
	}
}

// TestRunActions: the path under /runs/ splits into a run's id and what
// follows it (runid's tests check the ids themselves).
func TestRunActions(t *testing.T) {
	t.Parallel()
	for path, want := range map[string][2]string{
		"a": {"a", ""}, "a/live": {"a", "live"}, "a/2/cancel": {"a/2", "cancel"}, "a/2": {"a/2", ""}, "a/e2/3/signal": {"a/e2/3", "signal"},
		"a/2/redrive": {"a/2", "redrive"},
	} {
		if id, action := runid.Split(path, runActions...); id != want[0] || action != want[1] {
			t.Errorf("runid.Split(%q) = %q, %q; want %q, %q", path, id, action, want[0], want[1])
		}
	}
}
