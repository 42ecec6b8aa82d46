package store

import (
	"reflect"
	"testing"
	"time"
)

// at is the time of the tests' transitions; it has nanoseconds, for the
// precision to cut.
var at = time.Date(2025, 6, 1, 12, 0, 0, 123456789, time.UTC)

func TestNowAdd(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		now  Now
		d    time.Duration
		want time.Time
	}{
		{Now{At: at}, time.Second, at.Add(time.Second)},
		{Now{At: at}, 0, at},
		{Now{At: at, Precision: time.Microsecond}, time.Second, time.Date(2025, 6, 1, 12, 0, 1, 123456000, time.UTC)},
		{Now{At: at, Precision: time.Microsecond}, 999, time.Date(2025, 6, 1, 12, 0, 0, 123457000, time.UTC)},
	} {
		if got := tt.now.Add(tt.d); !got.Equal(tt.want) {
			t.Errorf("%+v.Add(%v) = %v, want %v", tt.now, tt.d, got, tt.want)
		}
	}
}

func TestAttemptLease(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ ttl, timeout, want time.Duration }{
		{time.Minute, 0, time.Minute},
		{time.Minute, time.Second, time.Second},
		{time.Minute, time.Hour, time.Minute},
		{time.Minute, time.Minute, time.Minute},
		{time.Minute, -time.Second, time.Minute},
	} {
		if got := AttemptLease(tt.ttl, tt.timeout); got != tt.want {
			t.Errorf("AttemptLease(%v, %v) = %v, want %v", tt.ttl, tt.timeout, got, tt.want)
		}
	}
}

func TestTaskStart(t *testing.T) {
	t.Parallel()
	first := at.Add(-time.Hour)
	for _, tt := range []struct {
		name string
		task Task
		now  Now
		want Task
	}{{
		name: "FirstAttempt",
		task: Task{ID: 7, Step: "charge"},
		now:  Now{At: at},
		want: Task{ID: 7, Step: "charge", Attempt: 1, Token: 1, Owner: "w", StartedAt: at, FirstStartedAt: at,
			ReadyAt: at, LeaseUntil: at.Add(time.Minute)},
	}, {
		name: "LaterAttemptKeepsItsFirstStartAndTheTimeItWasDue",
		task: Task{Attempt: 2, Token: 5, Owner: "old", FirstStartedAt: first, ReadyAt: first, Lapses: 1},
		now:  Now{At: at},
		want: Task{Attempt: 3, Token: 6, Owner: "w", StartedAt: at, FirstStartedAt: first, ReadyAt: first, Lapses: 1,
			LeaseUntil: at.Add(time.Minute)},
	}, {
		name: "LeaseCutToTheTimeout",
		task: Task{Timeout: time.Second},
		now:  Now{At: at},
		want: Task{Timeout: time.Second, Attempt: 1, Token: 1, Owner: "w", StartedAt: at, FirstStartedAt: at,
			ReadyAt: at, LeaseUntil: at.Add(time.Second)},
	}, {
		name: "LeaseInTheStoresPrecision",
		task: Task{},
		now:  Now{At: at, Precision: time.Microsecond},
		want: Task{Attempt: 1, Token: 1, Owner: "w", StartedAt: at, FirstStartedAt: at, ReadyAt: at,
			LeaseUntil: at.Add(time.Minute).Truncate(time.Microsecond)},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.task
			got.Start("w", time.Minute, tt.now)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Start:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestTaskAttemptStarted(t *testing.T) {
	t.Parallel()
	task := Task{ID: 7, RunID: "r", Execution: 2, Position: 3, Step: "charge", Attempt: 4, Token: 9, Owner: "w",
		LeaseUntil: at, IdempotencyKey: "k", Input: []byte(`1`)}
	want := Event{Type: EventAttemptStarted, Execution: 2, Position: 3, Step: "charge", Attempt: 4, Worker: "w",
		LeaseUntil: at, IdempotencyKey: "k"}
	if got := task.AttemptStarted(); !reflect.DeepEqual(got, want) {
		t.Errorf("AttemptStarted:\n got %+v\nwant %+v", got, want)
	}
}

func TestTaskClaimTotal(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		steps []StepQuota
		limit int
		want  int
	}{
		{nil, 0, 0},
		{nil, 5, 0},
		{[]StepQuota{{"a", 2}, {"b", 3}}, 0, 5},
		{[]StepQuota{{"a", 2}, {"b", 3}}, 4, 4},
		{[]StepQuota{{"a", 2}, {"b", 3}}, 9, 5},
		{[]StepQuota{{"a", 2}, {"b", 0}, {"c", -4}}, 0, 2},
		{[]StepQuota{{"a", 0}}, 3, 0},
	} {
		p := TaskClaimParams{Steps: tt.steps, Limit: tt.limit}
		if got := p.Total(); got != tt.want {
			t.Errorf("Total of %v, limit %d = %d, want %d", tt.steps, tt.limit, got, tt.want)
		}
	}
}

func TestTaskCompleteCompleted(t *testing.T) {
	t.Parallel()
	task := Task{Execution: 2, Position: 3, Step: "charge", Attempt: 4, Token: 9, Owner: "w"}
	p := TaskCompleteParams{TaskID: 1, Token: 9, Output: []byte(`"ok"`)}
	want := Event{Type: EventStepCompleted, Execution: 2, Position: 3, Step: "charge", Attempt: 4, Output: []byte(`"ok"`)}
	if got := p.Completed(&task); !reflect.DeepEqual(got, want) {
		t.Errorf("Completed:\n got %+v\nwant %+v", got, want)
	}
}

func TestTaskFailCheck(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		p    TaskFailParams
		ok   bool
	}{
		{"NoLeaseNext", TaskFailParams{Retry: true}, true},
		{"LeaseNext", TaskFailParams{Retry: true, LeaseNext: true, LeaseOwner: "w", LeaseTTL: time.Minute}, true},
		{"LeaseNextWithoutOwner", TaskFailParams{Retry: true, LeaseNext: true, LeaseTTL: time.Minute}, false},
		{"LeaseNextWithoutTTL", TaskFailParams{Retry: true, LeaseNext: true, LeaseOwner: "w"}, false},
		{"LeaseNextNegativeTTL", TaskFailParams{Retry: true, LeaseNext: true, LeaseOwner: "w", LeaseTTL: -1}, false},
		// Malformed whether or not it would lease.
		{"LeaseNextWithoutRetry", TaskFailParams{LeaseNext: true}, false},
	} {
		if err := tt.p.Check(); (err == nil) != tt.ok {
			t.Errorf("%s: Check() = %v, want ok = %v", tt.name, err, tt.ok)
		}
	}
}

func TestTaskFailLeasesNext(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		p    TaskFailParams
		want bool
	}{
		{TaskFailParams{LeaseNext: true, Retry: true}, true},
		{TaskFailParams{LeaseNext: true, Retry: true, Delay: time.Second}, false},
		{TaskFailParams{LeaseNext: true}, false},
		{TaskFailParams{Retry: true}, false},
	} {
		if got := tt.p.LeasesNext(); got != tt.want {
			t.Errorf("%+v.LeasesNext() = %v, want %v", tt.p, got, tt.want)
		}
	}
}

func TestTaskFailFailed(t *testing.T) {
	t.Parallel()
	task := Task{Execution: 2, Position: 3, Step: "charge", Attempt: 4}
	boom := ErrorInfo{Type: "E", Message: "boom"}
	for _, tt := range []struct {
		name string
		p    TaskFailParams
		now  Now
		want []Event
	}{{
		name: "Retry",
		p:    TaskFailParams{Error: boom, Retry: true, Delay: 2 * time.Second, Rule: "retry 3"},
		now:  Now{At: at},
		want: []Event{{Type: EventAttemptFailed, Execution: 2, Position: 3, Step: "charge", Attempt: 4, Error: &boom,
			Rule: "retry 3", Delay: 2 * time.Second, RetryAt: at.Add(2 * time.Second)}},
	}, {
		name: "RetryAtOnceInTheStoresPrecision",
		p:    TaskFailParams{Error: boom, Retry: true, Rule: "retry 3", LeaseNext: true},
		now:  Now{At: at, Precision: time.Microsecond},
		want: []Event{{Type: EventAttemptFailed, Execution: 2, Position: 3, Step: "charge", Attempt: 4, Error: &boom,
			Rule: "retry 3", RetryAt: at.Truncate(time.Microsecond)}},
	}, {
		name: "StepFails",
		p:    TaskFailParams{Error: boom, Rule: "retry 3", Reason: "exhausted", Delay: time.Second},
		now:  Now{At: at},
		want: []Event{
			{Type: EventAttemptFailed, Execution: 2, Position: 3, Step: "charge", Attempt: 4, Error: &boom,
				Rule: "retry 3", Reason: "exhausted"},
			{Type: EventStepFailed, Execution: 2, Position: 3, Step: "charge", Attempt: 4, Error: &boom,
				Reason: "exhausted"},
		},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dst := []Event{{Type: EventRunStarted}}
			got := tt.p.Failed(dst, &task, tt.now)
			if !reflect.DeepEqual(got, append(dst, tt.want...)) {
				t.Errorf("Failed:\n got %+v\nwant %+v", got, append(dst, tt.want...))
			}
			// The events keep a copy of the error: the params are the
			// caller's.
			tt.p.Error.Message = "changed"
			if got[1].Error.Message != "boom" {
				t.Errorf("the events' error is the params': %+v", got[1].Error)
			}
		})
	}
}

func TestTaskFailLapses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		expired bool
		lapses  int
		want    int
	}{
		{false, 0, 0},
		{false, 3, 0},
		{true, 0, 1},
		{true, 3, 4},
	} {
		p := TaskFailParams{Expired: tt.expired}
		if got := p.Lapses(tt.lapses); got != tt.want {
			t.Errorf("Lapses(%d) with Expired %v = %d, want %d", tt.lapses, tt.expired, got, tt.want)
		}
	}
}
