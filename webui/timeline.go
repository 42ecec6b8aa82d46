package webui

import (
	"encoding/json"
	"time"

	"reprise/retry"
	"reprise/store"
)

// A timeline is a run's history laid out for the page: a section per
// execution (one, unless the run continued as new), and in it a row per
// step, timer, child run, signal and version marker, in the order they
// first appear in the history.
type timeline struct {
	Executions []*execution
	// LastSeq is the sequence number of the last event.
	LastSeq int64
	// Final is true when the history ends with the run's end.
	Final bool
	// Next is the earliest next attempt a step of the run waits for, if
	// the run has not ended: the run is retrying.
	Next *planned
}

// An execution is one execution of the run, on its own time axis: from
// its start to its end, or to now (or the latest time planned, if later)
// while it runs.
type execution struct {
	Number         int
	Start, End     time.Time
	ContinuedAsNew bool
	Ended          bool
	Rows           []*row
	byPos          map[int]*row
}

// Row kinds.
const (
	kindStep   = "step"
	kindTimer  = "timer"
	kindChild  = "child"
	kindSignal = "signal"
	kindMarker = "marker"
)

// Row states, as the page shows them.
const (
	stateScheduled = "scheduled"
	stateRunning   = "running"
	stateRetrying  = "retrying"
	stateCompleted = "completed"
	stateFailed    = "failed"
	stateCancelled = "cancelled"
	stateWaiting   = "waiting"
	stateFired     = "fired"
	stateDropped   = "dropped"
)

// A row is one line of the timeline.
type row struct {
	Kind     string
	Seq      int64
	Position int
	// Name is the step's name, the timer's delay, the child's workflow,
	// the signal's name or the change id of a version marker.
	Name  string
	State string
	// Reason says why a step failed (exhausted, permanent, not_covered,
	// deadline, poison) or a child ended as it did.
	Reason     string
	Key        string
	Policy     string
	Version    int
	Input      json.RawMessage
	Output     json.RawMessage
	Error      *store.ErrorInfo
	Start, End time.Time
	Attempts   []*attempt
	Redrives   []redrive
	// Next is the step's next attempt, while it waits for it.
	Next *planned
	// FireAt is when a timer fires; Child a child run's id.
	FireAt time.Time
	Delay  time.Duration
	Child  string
	// Forecast is what the step's policy would decide for its remaining
	// attempts, while it has not ended.
	Forecast *forecast
	// Bar is where the row's span (a timer's, a child's) or its point (a
	// signal's, a marker's) is drawn; NextX where a planned attempt is.
	Bar   bar
	NextX float64

	exec *execution
}

// A bar is a span on an execution's axis, in percent of its width.
type bar struct {
	X, W float64
	// Label is true when the span is wide enough to write its length in.
	Label bool
}

// An attempt is one attempt of a step, and what the policy decided when
// it failed.
type attempt struct {
	Number     int
	Start, End time.Time
	// Running: the attempt has no result yet. Cut: the run or step ended
	// while it ran.
	Running, Cut bool
	// NoStart: the history has no AttemptStarted for it; Start is a guess.
	NoStart    bool
	Worker     string
	LeaseUntil time.Time
	OK         bool
	Error      *store.ErrorInfo
	// Outcome is ok, error, timeout, lost, deadline, panic, running or
	// cut.
	Outcome string
	// After a failure: the decision.
	Retry   bool
	Delay   time.Duration
	RetryAt time.Time
	Rule    string
	Reason  string
	// NextStart is when the next attempt started, if it has.
	NextStart time.Time
	// Bar is the attempt on the axis; Gap the wait after it, to the next
	// attempt's start or, while that is planned, its planned time.
	Bar, Gap bar
}

// A redrive gave the step a fresh attempt budget after attempt After.
type redrive struct {
	At    time.Time
	By    string
	After int
}

// planned is the next attempt of a step that waits for it.
type planned struct {
	Step      string
	Position  int
	Attempt   int
	At        time.Time
	ErrorType string
}

// buildTimeline lays out a run's history, as of now.
func buildTimeline(events []store.Event, now time.Time) *timeline {
	tl := &timeline{}
	execs := map[int]*execution{}
	exec := func(n int, at time.Time) *execution {
		if n == 0 {
			n = 1
		}
		x := execs[n]
		if x == nil {
			x = &execution{Number: n, Start: at, byPos: map[int]*row{}}
			execs[n] = x
			tl.Executions = append(tl.Executions, x)
		}
		return x
	}
	for _, ev := range events {
		tl.LastSeq = ev.Seq
		x := exec(ev.Execution, ev.At)
		add := func(kind string) *row {
			r := &row{Kind: kind, Seq: ev.Seq, Position: ev.Position, Name: ev.Step, Start: ev.At, exec: x}
			x.Rows = append(x.Rows, r)
			if ev.Position > 0 {
				x.byPos[ev.Position] = r
			}
			return r
		}
		// at finds the row of the event's position, adding one (of kind)
		// if the history lacks its start.
		at := func(kind string) *row {
			if r := x.byPos[ev.Position]; r != nil {
				return r
			}
			return add(kind)
		}
		switch ev.Type {
		case store.EventRunStarted:
			x.Start = ev.At
			tl.Final = false
		case store.EventStepScheduled:
			r := add(kindStep)
			r.State, r.Policy, r.Key, r.Input, r.Version = stateScheduled, ev.Policy, ev.IdempotencyKey, ev.Input, ev.Version
		case store.EventAttemptStarted:
			r := at(kindStep)
			if r.Key == "" {
				r.Key = ev.IdempotencyKey
			}
			if n := len(r.Attempts); n > 0 && r.Attempts[n-1].Retry {
				r.Attempts[n-1].NextStart = ev.At
			}
			r.Attempts = append(r.Attempts, &attempt{Number: ev.Attempt, Start: ev.At, Worker: ev.Worker,
				LeaseUntil: ev.LeaseUntil, Running: true, Outcome: "running"})
			r.State, r.Next = stateRunning, nil
		case store.EventAttemptFailed:
			r := at(kindStep)
			a := r.attempt(ev.Attempt, ev.At)
			a.End, a.Running, a.Error = ev.At, false, ev.Error
			a.Outcome = outcome(ev.Error)
			a.Retry, a.Delay, a.RetryAt, a.Rule, a.Reason = !ev.RetryAt.IsZero(), ev.Delay, ev.RetryAt, ev.Rule, ev.Reason
			r.Error = ev.Error
			if a.Retry {
				r.State = stateRetrying
				r.Next = &planned{Step: r.Name, Position: r.Position, Attempt: ev.Attempt + 1, At: ev.RetryAt}
				if ev.Error != nil {
					r.Next.ErrorType = ev.Error.Type
				}
			}
		case store.EventStepCompleted:
			r := at(kindStep)
			a := r.attempt(ev.Attempt, ev.At)
			a.End, a.Running, a.OK, a.Outcome = ev.At, false, true, "ok"
			r.State, r.Output, r.End, r.Next, r.Error = stateCompleted, ev.Output, ev.At, nil, nil
		case store.EventStepFailed:
			r := at(kindStep)
			r.State, r.Reason, r.End, r.Next = stateFailed, ev.Reason, ev.At, nil
			if ev.Error != nil {
				r.Error = ev.Error
			}
			r.cut(ev.At)
		case store.EventStepCancelRequested:
			r := at(kindStep)
			r.State, r.Reason, r.End, r.Next = stateCancelled, "lost a select", ev.At, nil
			r.cut(ev.At)
		case store.EventRunRedriven:
			r := at(kindStep)
			last := 0
			if n := len(r.Attempts); n > 0 {
				last = r.Attempts[n-1].Number
			}
			r.Redrives = append(r.Redrives, redrive{At: ev.At, By: ev.By, After: last})
			r.State, r.Reason, r.End = stateScheduled, "", time.Time{}
			x.End, x.Ended, tl.Final = time.Time{}, false, false
		case store.EventTimerScheduled:
			r := add(kindTimer)
			r.State, r.FireAt, r.Delay = stateWaiting, ev.FireAt, ev.Delay
		case store.EventTimerFired:
			r := at(kindTimer)
			r.State, r.End = stateFired, ev.At
		case store.EventChildStarted:
			r := add(kindChild)
			r.Name, r.Child, r.Input, r.State = ev.Workflow, ev.Child, ev.Input, stateRunning
		case store.EventChildCompleted:
			r := at(kindChild)
			r.State, r.Output, r.End = stateCompleted, ev.Output, ev.At
			if r.Child == "" {
				r.Child = ev.Child
			}
		case store.EventChildFailed:
			r := at(kindChild)
			r.State, r.Error, r.End = stateFailed, ev.Error, ev.At
			if ev.ChildStatus == store.RunCancelled {
				r.State = stateCancelled
			}
			if r.Child == "" {
				r.Child = ev.Child
			}
		case store.EventSignalReceived:
			r := add(kindSignal)
			r.Name, r.Position, r.Input, r.End, r.State = ev.Signal, 0, ev.Input, ev.At, "received"
		case store.EventVersionMarker:
			r := add(kindMarker)
			r.Name, r.Version, r.End, r.State = ev.Change, ev.Version, ev.At, "recorded"
		case store.EventRunContinuedAsNew:
			x.End, x.Ended, x.ContinuedAsNew = ev.At, true, true
			x.endRows(ev.At)
		case store.EventRunCompleted, store.EventRunFailed, store.EventRunCancelled:
			x.End, x.Ended, tl.Final = ev.At, true, true
			x.endRows(ev.At)
		}
	}
	for _, x := range tl.Executions {
		if !x.Ended {
			x.End = now
			for _, r := range x.Rows {
				if r.Next != nil {
					x.End = latest(x.End, r.Next.At)
					if tl.Next == nil || r.Next.At.Before(tl.Next.At) {
						tl.Next = r.Next
					}
				}
				if r.Kind == kindTimer && r.State == stateWaiting {
					x.End = latest(x.End, r.FireAt)
				}
				if r.Kind == kindStep {
					r.Forecast = r.forecast(now)
				}
			}
		}
		if !x.End.After(x.Start) {
			x.End = x.Start.Add(time.Millisecond)
		}
		x.layout(now)
	}
	return tl
}

// minWidth is the narrowest a bar is drawn, in percent, so that an
// attempt of a millisecond in a run of an hour is still seen.
const minWidth = 0.4

// span returns the bar from a to b on x's axis.
func (x *execution) span(a, b time.Time) bar {
	total := float64(x.End.Sub(x.Start))
	pos := func(t time.Time) float64 {
		return min(max(100*float64(t.Sub(x.Start))/total, 0), 100)
	}
	l, r := pos(a), pos(b)
	return bar{X: l, W: max(r-l, 0), Label: r-l >= 8}
}

// layout places the rows' attempts, gaps, timers and points on the axis.
func (x *execution) layout(now time.Time) {
	for _, r := range x.Rows {
		for _, a := range r.Attempts {
			end := a.End
			if a.Running {
				end = latest(now, a.Start)
			}
			a.Bar = x.span(a.Start, end)
			a.Bar.W = max(a.Bar.W, minWidth)
			if a.Retry {
				next := a.NextStart
				if next.IsZero() {
					next = a.RetryAt
				}
				a.Gap = x.span(a.End, next)
			}
		}
		switch r.Kind {
		case kindTimer:
			end := r.End
			if end.IsZero() {
				end = r.FireAt
			}
			r.Bar = x.span(r.Start, end)
		case kindChild:
			end := r.End
			if end.IsZero() {
				end = now
			}
			r.Bar = x.span(r.Start, end)
		default:
			r.Bar = x.span(r.Start, r.Start)
		}
		r.Bar.W = max(r.Bar.W, minWidth)
		if r.Next != nil {
			r.NextX = x.span(r.Next.At, r.Next.At).X
		}
	}
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// attempt returns the row's attempt number n, adding it if the history
// has no start for it: it then starts where the one before it planned
// its retry, or where the step was scheduled.
func (r *row) attempt(n int, at time.Time) *attempt {
	for i := len(r.Attempts) - 1; i >= 0; i-- {
		if r.Attempts[i].Number == n {
			return r.Attempts[i]
		}
	}
	start := r.Start
	if k := len(r.Attempts); k > 0 {
		prev := r.Attempts[k-1]
		start = latest(prev.End, prev.RetryAt)
		if prev.Retry {
			prev.NextStart = start
		}
	}
	if start.After(at) {
		start = at
	}
	a := &attempt{Number: n, Start: start, NoStart: true}
	r.Attempts = append(r.Attempts, a)
	return a
}

// cut ends an attempt still running when its step or run ends.
func (r *row) cut(at time.Time) {
	for _, a := range r.Attempts {
		if a.Running {
			a.Running, a.Cut, a.End, a.Outcome = false, true, at, "cut"
		}
	}
}

// endRows closes what an execution's end leaves open: attempts cut,
// timers and steps and children dropped.
func (x *execution) endRows(at time.Time) {
	for _, r := range x.Rows {
		r.cut(at)
		r.Next = nil
		switch r.State {
		case stateScheduled, stateRunning, stateRetrying, stateWaiting:
			// A child run left running ends on its own, or is cancelled
			// with its parent: its own page says which.
			r.State, r.End = stateDropped, at
		}
	}
}

// outcome names a failed attempt's outcome by its error's type: the
// engine's own types for a timeout, a lost worker, a deadline and a panic.
func outcome(e *store.ErrorInfo) string {
	if e == nil {
		return "error"
	}
	switch e.Type {
	case "Timeout":
		return "timeout"
	case "WorkerLost":
		return "lost"
	case "DeadlineExceeded":
		return "deadline"
	case "Panic":
		return "panic"
	}
	return "error"
}

// A forecast is what a step's policy would decide for its remaining
// attempts if each failed at once as the last one did: retry.Explain
// from the attempt the step is at.
type forecast struct {
	Policy    *retry.Policy
	ErrorType string
	// From is the attempt the forecast starts with, as the history counts
	// attempts.
	From int
	// Start is the start of the step's first attempt (since its last
	// redrive), from which At counts.
	Start time.Time
	Lines []forecastLine
	More  bool
}

type forecastLine struct {
	Attempt int
	Retry   bool
	Delay   time.Duration
	At      time.Time
	Rule    string
	Reason  string
}

// forecast explains the step's policy for its remaining attempts, or
// returns nil when the step has ended or its policy cannot be read.
func (r *row) forecast(now time.Time) *forecast {
	if r.Policy == "" || (r.State != stateRunning && r.State != stateRetrying && r.State != stateScheduled) {
		return nil
	}
	p, err := retry.ParseAny(r.Policy)
	if err != nil {
		return nil
	}
	base := 0
	if n := len(r.Redrives); n > 0 {
		base = r.Redrives[n-1].After
	}
	f := retry.Failure{Attempt: 1, Types: []string{"Error"}, Key: r.Key}
	fc := &forecast{Policy: &p, ErrorType: "Error", From: base + 1, Start: now}
	var first *attempt
	for _, a := range r.Attempts {
		if a.Number > base && first == nil {
			first = a
		}
	}
	if first != nil {
		fc.Start = first.Start
	}
	if n := len(r.Attempts); n > 0 && r.Attempts[n-1].Number > base {
		last := r.Attempts[n-1]
		fc.From = last.Number
		failAt := latest(now, last.Start)
		if !last.Running {
			fc.From = last.Number + 1
			failAt = latest(now, last.RetryAt)
		}
		if last.Error != nil && last.Error.Type != "" {
			fc.ErrorType = last.Error.Type
		}
		f.Elapsed = failAt.Sub(fc.Start)
	}
	f.Attempt, f.Types = fc.From-base, []string{fc.ErrorType}
	decisions, more := p.Explain(f, 0)
	for _, d := range decisions {
		l := forecastLine{Attempt: d.Attempt + base, Retry: d.Retry, Delay: d.Delay, At: fc.Start.Add(d.At), Reason: string(d.Reason)}
		if d.Rule >= 0 {
			l.Rule = p.Rules[d.Rule].String()
		}
		fc.Lines = append(fc.Lines, l)
	}
	fc.More = more
	return fc
}
