package store

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRunCreateCheck(t *testing.T) {
	t.Parallel()
	first := &RunAdvanceParams{Steps: []StepSpec{{Position: 1, Name: "s", Lease: true}}}
	for _, tt := range []struct {
		name string
		p    RunCreateParams
		ok   bool
	}{
		{"Plain", RunCreateParams{ID: "r", Workflow: "w"}, true},
		{"NoID", RunCreateParams{Workflow: "w"}, false},
		{"NoWorkflow", RunCreateParams{ID: "r"}, false},
		{"First", RunCreateParams{ID: "r", Workflow: "w", Owner: "e", First: &RunAdvanceParams{}}, true},
		{"FirstWithoutOwner", RunCreateParams{ID: "r", Workflow: "w", First: &RunAdvanceParams{}}, false},
		{"BadFirst", RunCreateParams{ID: "r", Workflow: "w", Owner: "e", First: first}, false},
	} {
		if err := tt.p.Check(); (err == nil) != tt.ok {
			t.Errorf("%s: Check() = %v, want ok = %v", tt.name, err, tt.ok)
		}
	}
}

func TestRunCreateStarted(t *testing.T) {
	t.Parallel()
	p := RunCreateParams{ID: "r", Workflow: "order", Input: json.RawMessage(`{"a":1}`), Owner: "e"}
	want := Event{Type: EventRunStarted, Execution: 1, Workflow: "order", Input: json.RawMessage(`{"a":1}`)}
	if got := p.Started(); !reflect.DeepEqual(got, want) {
		t.Errorf("Started:\n got %+v\nwant %+v", got, want)
	}
}

func TestRunAdvanceCheck(t *testing.T) {
	t.Parallel()
	leased := []StepSpec{{Position: 1, Name: "s"}, {Position: 2, Name: "t", Lease: true}}
	for _, tt := range []struct {
		name string
		p    RunAdvanceParams
		ok   bool
	}{
		{"Empty", RunAdvanceParams{}, true},
		{"Finish", RunAdvanceParams{Finish: &RunFinish{Status: RunCompleted}}, true},
		{"FinishNotFinal", RunAdvanceParams{Finish: &RunFinish{Status: RunRunning}}, false},
		{"ContinueAsNew", RunAdvanceParams{Finish: &RunFinish{ContinueAsNew: true}}, true},
		{"Leased", RunAdvanceParams{Steps: leased, LeaseOwner: "e", LeaseTTL: time.Minute}, true},
		{"LeasedWithoutOwner", RunAdvanceParams{Steps: leased, LeaseTTL: time.Minute}, false},
		{"LeasedWithoutTTL", RunAdvanceParams{Steps: leased, LeaseOwner: "e"}, false},
		{"NotLeasedWithoutOwner", RunAdvanceParams{Steps: leased[:1]}, true},
		{"Child", RunAdvanceParams{Children: []ChildSpec{{Position: 1, ID: "c", Workflow: "w"}}}, true},
		{"ChildWithoutID", RunAdvanceParams{Children: []ChildSpec{{Position: 1, Workflow: "w"}}}, false},
		{"ChildWithoutWorkflow", RunAdvanceParams{Children: []ChildSpec{{Position: 1, ID: "c"}}}, false},
	} {
		if err := tt.p.Check(); (err == nil) != tt.ok {
			t.Errorf("%s: Check() = %v, want ok = %v", tt.name, err, tt.ok)
		}
	}
}

// planned sums up a plan: each entry's event type and position, and
// whether a row is made for it.
func planned(plan []Scheduled) string {
	var b strings.Builder
	for _, s := range plan {
		mark := ""
		if s.Make {
			mark = "+"
		}
		fmt.Fprintf(&b, "%s%d%s ", s.Event.Type, s.Event.Position, mark)
	}
	return strings.TrimSpace(b.String())
}

func TestRunAdvancePlan(t *testing.T) {
	t.Parallel()
	steps := []StepSpec{{Position: 4, Name: "d"}, {Position: 1, Name: "a", Lease: true}}
	timers := []TimerSpec{{Position: 2, Delay: time.Second}}
	markers := []MarkerSpec{{Position: 3, Name: "m", Version: 2}}
	children := []ChildSpec{{Position: 5, ID: "c", Workflow: "w"}}
	for _, tt := range []struct {
		name string
		p    RunAdvanceParams
		want string
	}{{
		name: "Nothing",
		want: "",
	}, {
		name: "OneStep",
		p:    RunAdvanceParams{Steps: steps[:1]},
		want: "StepScheduled4+",
	}, {
		name: "InPositionOrder",
		p:    RunAdvanceParams{Steps: steps, Timers: timers, Markers: markers, Children: children},
		want: "StepScheduled1 AttemptStarted1+ TimerScheduled2+ VersionMarker3 StepScheduled4+ ChildStarted5",
	}, {
		name: "Cancelled",
		p:    RunAdvanceParams{Steps: steps, Timers: timers, Cancels: []int{1, 2, 4}},
		want: "StepScheduled1 AttemptStarted1 TimerScheduled2 StepScheduled4",
	}, {
		name: "Finished",
		p: RunAdvanceParams{Steps: steps, Timers: timers, Markers: markers, Children: children,
			Finish: &RunFinish{Status: RunCompleted}},
		want: "StepScheduled1 TimerScheduled2 VersionMarker3 StepScheduled4 ChildStarted5",
	}, {
		name: "ContinuedAsNew",
		p:    RunAdvanceParams{Steps: steps, Finish: &RunFinish{ContinueAsNew: true}},
		want: "StepScheduled1 StepScheduled4",
	}, {
		// Two entries at one position keep the order of their kinds.
		name: "Stable",
		p:    RunAdvanceParams{Children: []ChildSpec{{Position: 1, ID: "c"}}, Markers: []MarkerSpec{{Position: 1}}},
		want: "VersionMarker1 ChildStarted1",
	}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			plan := tt.p.Plan()
			if got := planned(plan); got != tt.want {
				t.Errorf("Plan = %s\nwant   %s", got, tt.want)
			}
			if len(plan) != cap(plan) {
				t.Errorf("Plan has %d entries in room for %d", len(plan), cap(plan))
			}
		})
	}
}

func TestRunAdvancePlanEvents(t *testing.T) {
	t.Parallel()
	p := RunAdvanceParams{
		Steps: []StepSpec{{Position: 1, Name: "a", Input: json.RawMessage(`1`), IdempotencyKey: "k", PolicyText: "retry 3",
			StepVersion: 2}},
		Timers:   []TimerSpec{{Position: 2, Delay: time.Second}},
		Markers:  []MarkerSpec{{Position: 3, Name: "m", Version: 4}},
		Children: []ChildSpec{{Position: 4, ID: "c", Workflow: "w", Input: json.RawMessage(`2`)}},
	}
	plan := p.Plan()
	want := []Event{
		{Type: EventStepScheduled, Position: 1, Step: "a", Input: json.RawMessage(`1`), Policy: "retry 3",
			IdempotencyKey: "k", Version: 2},
		{Type: EventTimerScheduled, Position: 2, Delay: time.Second},
		{Type: EventVersionMarker, Position: 3, Change: "m", Version: 4},
		{Type: EventChildStarted, Position: 4, Child: "c", Workflow: "w", Input: json.RawMessage(`2`)},
	}
	for i, s := range plan {
		if !reflect.DeepEqual(s.Event, want[i]) {
			t.Errorf("entry %d:\n got %+v\nwant %+v", i, s.Event, want[i])
		}
		if timed := s.Event.Type == EventTimerScheduled; s.Timed() != timed {
			t.Errorf("entry %d: Timed() = %v, want %v", i, s.Timed(), timed)
		}
	}
	if plan[0].Step != &p.Steps[0] || plan[1].Timer != &p.Timers[0] || plan[3].Child != &p.Children[0] {
		t.Errorf("plan does not point to what it schedules: %+v", plan)
	}
}

func TestRunAdvanceStamp(t *testing.T) {
	t.Parallel()
	p := RunAdvanceParams{
		RunID: "r", LeaseOwner: "e", LeaseTTL: time.Minute,
		Steps: []StepSpec{
			{Position: 1, Name: "a", Input: json.RawMessage(`1`), IdempotencyKey: "k", Policy: json.RawMessage(`{}`),
				Timeout: 10 * time.Second, StepVersion: 3, Lease: true},
			{Position: 3, Name: "c", Lease: true},
		},
		Timers:  []TimerSpec{{Position: 2, Delay: time.Second}},
		Cancels: []int{3},
	}
	plan := p.Plan()
	now := Now{At: at, Precision: time.Microsecond}
	p.Stamp(plan, 2, now)
	lease := at.Add(10 * time.Second).Truncate(time.Microsecond)
	wantTask := &Task{RunID: "r", Execution: 2, Position: 1, Step: "a", Input: json.RawMessage(`1`), IdempotencyKey: "k",
		Policy: json.RawMessage(`{}`), Timeout: 10 * time.Second, Attempt: 1, Token: 1, Owner: "e", LeaseUntil: lease,
		StartedAt: at, FirstStartedAt: at, ReadyAt: at, StepVersion: 3}
	if got := plan[1].Task; !reflect.DeepEqual(got, wantTask) {
		t.Errorf("leased task:\n got %+v\nwant %+v", got, wantTask)
	}
	wantStarted := Event{Type: EventAttemptStarted, Execution: 2, Position: 1, Step: "a", Attempt: 1, Worker: "e",
		LeaseUntil: lease, IdempotencyKey: "k"}
	if got := plan[1].Event; !reflect.DeepEqual(got, wantStarted) {
		t.Errorf("AttemptStarted:\n got %+v\nwant %+v", got, wantStarted)
	}
	if got, want := plan[2].Event.FireAt, at.Add(time.Second).Truncate(time.Microsecond); !got.Equal(want) {
		t.Errorf("FireAt = %v, want %v", got, want)
	}
	// A step cancelled as it is leased: its attempt starts, with no task.
	if got := plan[4]; got.Task != nil || got.Event.Type != EventAttemptStarted || got.Event.Worker != "e" {
		t.Errorf("cancelled leased step's entry = %+v, want AttemptStarted and no task", got)
	}
}

func TestRunAdvanceChildRun(t *testing.T) {
	t.Parallel()
	c := &ChildSpec{Position: 2, ID: "c", Workflow: "w", Input: json.RawMessage(`1`)}
	started := Event{Type: EventRunStarted, Execution: 1, Workflow: "w", Input: json.RawMessage(`1`)}
	for _, tt := range []struct {
		name   string
		p      RunAdvanceParams
		status RunStatus
		events []Event
	}{
		{"Pending", RunAdvanceParams{}, RunPending, []Event{started}},
		{"ParentFinishes", RunAdvanceParams{Finish: &RunFinish{Status: RunFailed}}, RunCancelled, []Event{started,
			{Type: EventRunCancelled, Execution: 1, Reason: ReasonParentFinished}}},
		{"ParentContinues", RunAdvanceParams{Finish: &RunFinish{ContinueAsNew: true}}, RunCancelled, []Event{started,
			{Type: EventRunCancelled, Execution: 1, Reason: ReasonParentFinished}}},
	} {
		status, events := tt.p.ChildRun(c)
		if status != tt.status || !reflect.DeepEqual(events, tt.events) {
			t.Errorf("%s: ChildRun = %s %+v\nwant %s %+v", tt.name, status, events, tt.status, tt.events)
		}
	}
}

func TestRunAdvanceCancelRequests(t *testing.T) {
	t.Parallel()
	steps := []StepSpec{{Position: 4, Name: "new"}, {Position: 5, Name: "leased", Lease: true}}
	dropped := map[int]string{1: "old", 2: "older"}
	for _, tt := range []struct {
		name string
		p    RunAdvanceParams
		want string // position:step
	}{
		{"None", RunAdvanceParams{Steps: steps}, ""},
		{"Dropped", RunAdvanceParams{Cancels: []int{2, 1}}, "2:older 1:old"},
		{"TimerOrNothing", RunAdvanceParams{Cancels: []int{3, 9}}, ""},
		{"ScheduledHere", RunAdvanceParams{Steps: steps, Cancels: []int{5, 4}}, "5:leased 4:new"},
		{"Once", RunAdvanceParams{Steps: steps, Cancels: []int{1, 4, 1, 4}}, "1:old 4:new"},
		{"ExecutionEnds", RunAdvanceParams{Steps: steps, Cancels: []int{4, 1}, Finish: &RunFinish{Status: RunCompleted}},
			"1:old"},
	} {
		var got []string
		for _, e := range tt.p.CancelRequests(dropped) {
			if e.Type != EventStepCancelRequested {
				t.Errorf("%s: event %+v, want StepCancelRequested", tt.name, e)
			}
			got = append(got, fmt.Sprintf("%d:%s", e.Position, e.Step))
		}
		if strings.Join(got, " ") != tt.want {
			t.Errorf("%s: CancelRequests = %v, want %s", tt.name, got, tt.want)
		}
	}
}

func TestRunFinishEnded(t *testing.T) {
	t.Parallel()
	boom := &ErrorInfo{Type: "E", Message: "boom"}
	out := json.RawMessage(`"ok"`)
	for _, tt := range []struct {
		f    RunFinish
		want Event
		drop bool
	}{
		{RunFinish{Status: RunCompleted, Output: out}, Event{Type: EventRunCompleted, Output: out}, true},
		{RunFinish{Status: RunFailed, Error: boom}, Event{Type: EventRunFailed, Error: boom}, false},
		{RunFinish{Status: RunCancelled, Error: boom}, Event{Type: EventRunCancelled, Error: boom}, true},
	} {
		if got := tt.f.Ended(); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Ended() = %+v, want %+v", tt.f.Status, got, tt.want)
		}
		if got := tt.f.DropsFailedSteps(); got != tt.drop {
			t.Errorf("%s: DropsFailedSteps() = %v, want %v", tt.f.Status, got, tt.drop)
		}
	}
}

func TestRunFinishContinued(t *testing.T) {
	t.Parallel()
	f := RunFinish{ContinueAsNew: true, Status: RunFailed, Input: json.RawMessage(`{"n":2}`)}
	ended, started := f.Continued("loop", 3)
	got := []Event{ended, started}
	want := []Event{
		{Type: EventRunContinuedAsNew, Execution: 3, Input: f.Input},
		{Type: EventRunStarted, Execution: 4, Workflow: "loop", Input: f.Input},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Continued:\n got %+v\nwant %+v", got, want)
	}
	if !f.DropsFailedSteps() {
		t.Error("a continuation as new keeps the failed steps")
	}
	run := Run{Execution: 3, Status: RunRunning}
	f.Apply(&run)
	if run.Execution != started.Execution || !slices.Equal(run.Input, started.Input) || run.Status != RunRunning {
		t.Errorf("Apply left %+v, not as the events say", run)
	}
}
