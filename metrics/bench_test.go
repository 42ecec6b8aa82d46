package metrics_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"reprise"
	"reprise/metrics"
)

// BenchmarkOneStepRun is what metrics add to a one-step run: its
// attempt's start and end, and the run's end.
func BenchmarkOneStepRun(b *testing.B) {
	c, a := benchAttempt(b, "noop", 1)
	for b.Loop() {
		c.AttemptStarted(a)
		c.AttemptEnded(reprise.AttemptEnd{AttemptInfo: a, Outcome: reprise.OutcomeOK, Duration: time.Millisecond})
		c.RunEnded(reprise.RunEnd{RunID: a.RunID, Workflow: "one-step", Status: reprise.RunCompleted})
	}
}

// BenchmarkFailedAttempt is what metrics add to a retry that fails and is
// retried again.
func BenchmarkFailedAttempt(b *testing.B) {
	c, a := benchAttempt(b, "flaky", 2)
	for b.Loop() {
		c.AttemptStarted(a)
		c.AttemptEnded(reprise.AttemptEnd{AttemptInfo: a, Outcome: reprise.OutcomeRetryable, ErrorType: "Busy",
			Duration: time.Millisecond, Retry: true})
	}
}

// benchAttempt returns a Collector on a registry of its own, and an
// attempt of step that waited a millisecond to start.
func benchAttempt(b *testing.B, step string, attempt int) (*metrics.Collector, reprise.AttemptInfo) {
	b.Helper()
	c, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	b.ReportAllocs()
	return c, reprise.AttemptInfo{RunID: "r19b2c3d4e5f-0123456789abcdef0123", Step: step, Attempt: attempt, Worker: "host-1-abc",
		Execution: 1, Position: 1, IdempotencyKey: "0123456789abcdef0123456789abcdef", Due: now.Add(-time.Millisecond), Started: now}
}
