package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"reprise"
	"reprise/metrics"
	"reprise/reprisetest"
	"reprise/retry"
	"reprise/store"
)

// newCollector returns a Collector on a registry of its own.
func newCollector(t *testing.T) (*prometheus.Registry, *metrics.Collector) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	c, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	return reg, c
}

// flakyStep returns step flaky, which fails with Busy until its attempt
// ok, under policy.
func flakyStep(ok int, policy string) *reprise.StepDef[int, int] {
	return reprise.NewStep("flaky", func(ctx context.Context, _ int) (int, error) {
		if info, _ := reprise.StepInfoFrom(ctx); info.Attempt < ok {
			return 0, retry.NewError("Busy", "try later")
		}
		return 1, nil
	}, reprise.WithPolicyText(policy))
}

func TestCollectorCountsARunWithAFlakyStep(t *testing.T) {
	t.Parallel()
	reg, c := newCollector(t)
	flaky := flakyStep(3, "[retry: 5, backoff: 1s]")
	doomed := reprise.NewStep("doomed", func(ctx context.Context, _ int) (int, error) {
		return 0, reprise.Permanent(retry.NewError("BadInput", "no"))
	})
	tired := reprise.NewStep("tired", func(ctx context.Context, _ int) (int, error) {
		return 0, errors.New("always")
	}, reprise.WithPolicyText("[retry: 2, backoff: 1s]")) // three attempts
	wf := reprise.NewWorkflow("order", func(ctx context.Context, _ int) (int, error) {
		if _, err := reprise.Step(ctx, flaky, 0); err != nil {
			return 0, err
		}
		reprise.Step(ctx, tired, 0) //nolint:errcheck // it fails, and the workflow goes on
		return reprise.Step(ctx, doomed, 0)
	})
	env := reprisetest.New(t, &reprise.Config{Observer: c}, wf, flaky, doomed, tired)
	h, err := wf.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	if run := env.Wait(h.ID); run.Status != store.RunFailed {
		t.Fatalf("run %s, want failed", run.Status)
	}
	// The run's end is observed just after the store records it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if n, err := testutil.GatherAndCount(reg, "reprise_runs_finished_total"); err == nil && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the run's end was not observed")
		}
	}

	want := `
# HELP reprise_attempts_total Attempts ended, by step, outcome (ok, retryable, permanent, timeout, worker_lost, cancelled) and error type.
# TYPE reprise_attempts_total counter
reprise_attempts_total{error_type="",outcome="ok",step="flaky"} 1
reprise_attempts_total{error_type="Busy",outcome="retryable",step="flaky"} 2
reprise_attempts_total{error_type="BadInput",outcome="permanent",step="doomed"} 1
reprise_attempts_total{error_type="errorString",outcome="retryable",step="tired"} 3
# HELP reprise_retries_scheduled_total Retries the steps' policies scheduled, by step.
# TYPE reprise_retries_scheduled_total counter
reprise_retries_scheduled_total{step="flaky"} 2
reprise_retries_scheduled_total{step="tired"} 2
# HELP reprise_steps_failed_total Steps that failed, by step and reason (exhausted, permanent, not_covered, deadline, poison).
# TYPE reprise_steps_failed_total counter
reprise_steps_failed_total{reason="exhausted",step="tired"} 1
reprise_steps_failed_total{reason="permanent",step="doomed"} 1
# HELP reprise_runs_finished_total Runs that ended, by workflow and status (completed, failed, cancelled).
# TYPE reprise_runs_finished_total counter
reprise_runs_finished_total{status="failed",workflow="order"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "reprise_attempts_total",
		"reprise_retries_scheduled_total", "reprise_steps_failed_total", "reprise_runs_finished_total"); err != nil {
		t.Error(err)
	}
	for _, h := range []struct {
		name, step string
		count      uint64
	}{
		{"reprise_attempt_duration_seconds", "flaky", 3},
		{"reprise_attempt_duration_seconds", "tired", 3},
		{"reprise_retry_delay_seconds", "flaky", 2},
		{"reprise_retry_delay_seconds", "tired", 2},
	} {
		if got := histogramCount(t, reg, h.name, h.step); got != h.count {
			t.Errorf("%s{step=%q}: %d observations, want %d", h.name, h.step, got, h.count)
		}
	}
}

func histogramCount(t *testing.T, g prometheus.Gatherer, name, step string) uint64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "step" && l.GetValue() == step {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

func TestCollectorFoldsLabelsPastTheirLimits(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	c, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range metrics.MaxErrorTypes + 10 {
		c.AttemptEnded(reprise.AttemptEnd{AttemptInfo: reprise.AttemptInfo{Step: "s"}, Outcome: reprise.OutcomeRetryable,
			ErrorType: fmt.Sprintf("Type%d", i), Retry: true})
	}
	for i := range metrics.MaxSteps + 5 {
		c.AttemptEnded(reprise.AttemptEnd{AttemptInfo: reprise.AttemptInfo{Step: fmt.Sprintf("step%d", i)}, Outcome: reprise.OutcomeOK})
	}
	for i := range metrics.MaxWorkflows + 1 {
		c.RunEnded(reprise.RunEnd{Workflow: fmt.Sprintf("wf%d", i), Status: store.RunCompleted})
	}
	if n := testutil.CollectAndCount(c.AttemptsVec(), "reprise_attempts_total"); n != metrics.MaxErrorTypes+1+metrics.MaxSteps {
		// 50 types of step s, one _other type of s; 199 other steps ok, one _other step ok.
		t.Errorf("%d attempt series, want %d", n, metrics.MaxErrorTypes+1+metrics.MaxSteps)
	}
	if got := testutil.ToFloat64(c.AttemptsVec().WithLabelValues("s", "retryable", metrics.Other)); got != 10 {
		t.Errorf("%v attempts of type _other, want 10", got)
	}
	if got := testutil.ToFloat64(c.AttemptsVec().WithLabelValues(metrics.Other, "ok", "")); got != 6 {
		t.Errorf("%v attempts of step _other, want 6", got)
	}
	if n := testutil.CollectAndCount(reg, "reprise_runs_finished_total"); n != metrics.MaxWorkflows+1 {
		t.Errorf("%d run series, want %d", n, metrics.MaxWorkflows+1)
	}
}
