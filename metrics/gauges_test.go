package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"reprise"
	"reprise/metrics"
	"reprise/reprisetest"
	"reprise/store"
)

// countingStats counts the reads of the store's counts.
type countingStats struct {
	metrics.Stats
	reads atomic.Int32
}

func (s *countingStats) StatsGet(ctx context.Context) (*store.Stats, error) {
	s.reads.Add(1)
	return s.Stats.StatsGet(ctx)
}

// TestGaugesAndWaitsOfARetryAndABacklog drives a run into a long backoff
// and another to a step nobody claims, and reads the gauges, their cache,
// and the waits before each attempt started.
func TestGaugesAndWaitsOfARetryAndABacklog(t *testing.T) {
	t.Parallel()
	reg, c := newCollector(t)
	flaky := flakyStep(2, "[retry: 3, backoff: 1h]")
	order := reprise.NewWorkflow("order", func(ctx context.Context, _ int) (int, error) {
		return reprise.Step(ctx, flaky, 0)
	})
	pulled := reprise.NewWorkflow("pulled", func(ctx context.Context, n int) (int, error) {
		return reprise.Call[int](ctx, "resize", n)
	})
	env := reprisetest.New(t, &reprise.Config{Observer: c}, order, pulled, flaky)
	if err := env.Engine.RegisterRemoteStep("resize", nil); err != nil {
		t.Fatal(err)
	}
	stats := &countingStats{Stats: env.Store}
	gauges, err := metrics.NewGauges(reg, metrics.GaugesConfig{Store: stats, Engine: env.Engine, Steps: []string{"flaky"}})
	if err != nil {
		t.Fatal(err)
	}
	ho, err := order.Start(t.Context(), env.Engine, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pulled.Start(t.Context(), env.Engine, 0); err != nil {
		t.Fatal(err)
	}
	env.AdvanceUntil(func() bool {
		events := env.History(ho.ID)
		return events[len(events)-1].Type == store.EventAttemptFailed
	})
	env.Settle()
	if err := gauges.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}

	// order waits an hour for its retry; pulled's resize waits for a worker.
	requireGathered(t, reg, map[string]float64{
		"reprise_runs_retrying":                                 1,
		`reprise_tasks_ready{step="resize"}`:                    1,
		`reprise_tasks_ready{step="flaky"}`:                     0,
		"reprise_runs_resident":                                 2,
		"reprise_stats_read_errors_total":                       0,
		`reprise_schedule_to_start_seconds_count{step="flaky"}`: 1,
	})
	requireGathered(t, reg, map[string]float64{"reprise_runs_retrying": 1})
	if n := stats.reads.Load(); n != 1 {
		t.Errorf("%d reads of the store for a refresh and two scrapes, want 1", n)
	}

	// The retry comes due, starts and succeeds: its lateness is the time
	// between its planned start and its start.
	if run := env.Wait(ho.ID); run.Status != store.RunCompleted {
		t.Fatalf("order run %s, want completed", run.Status)
	}
	env.Settle() // the engine lets the ended run go
	if err := gauges.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	var retryAt, started time.Time
	for _, e := range env.History(ho.ID) {
		switch {
		case e.Type == store.EventAttemptFailed:
			retryAt = e.RetryAt
		case e.Type == store.EventAttemptStarted && e.Attempt == 2:
			started = e.At
		}
	}
	requireGathered(t, reg, map[string]float64{
		"reprise_runs_retrying":                                 0,
		`reprise_tasks_ready{step="resize"}`:                    1,
		`reprise_tasks_ready{step="flaky"}`:                     0,
		"reprise_runs_resident":                                 1,
		`reprise_schedule_to_start_seconds_count{step="flaky"}`: 2,
		`reprise_retry_lateness_seconds_count{step="flaky"}`:    1,
		`reprise_retry_lateness_seconds_sum{step="flaky"}`:      started.Sub(retryAt).Seconds(),
	})
	if n := stats.reads.Load(); n != 2 {
		t.Errorf("%d reads of the store for two refreshes, want 2", n)
	}
}

// stuckStats is a store whose reads of counts never answer.
type stuckStats struct{ reads atomic.Int32 }

func (s *stuckStats) StatsGet(ctx context.Context) (*store.Stats, error) {
	s.reads.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestGaugesReadOfAStuckStoreTimesOut: a read that does not answer ends
// at Timeout, counts an error and keeps the values read before.
func TestGaugesReadOfAStuckStoreTimesOut(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	st := &stuckStats{}
	gauges, err := metrics.NewGauges(reg, metrics.GaugesConfig{Store: st, Timeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := gauges.Refresh(t.Context()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Refresh of a stuck store: %v, want the deadline exceeded", err)
	}
	for range 3 {
		requireGathered(t, reg, map[string]float64{"reprise_runs_retrying": 0, "reprise_stats_read_errors_total": 1})
	}
	if n := st.reads.Load(); n != 1 {
		t.Errorf("%d reads for a refresh and three scrapes, want 1", n)
	}
	if _, err := metrics.NewGauges(prometheus.NewRegistry(), metrics.GaugesConfig{Every: -1}); err == nil ||
		!strings.Contains(err.Error(), "Store is required") || !strings.Contains(err.Error(), "must not be negative") {
		t.Errorf("NewGauges without a store and with a negative Every: %v", err)
	}
}

// requireGathered gathers reg and requires the samples want, by name and
// labels as the text format writes them; histograms by _count and _sum.
func requireGathered(t *testing.T, reg prometheus.Gatherer, want map[string]float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			suffix := ""
			if len(labels) > 0 {
				suffix = "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.GetHistogram() != nil:
				got[mf.GetName()+"_count"+suffix] = float64(m.GetHistogram().GetSampleCount())
				got[mf.GetName()+"_sum"+suffix] = m.GetHistogram().GetSampleSum()
			case m.GetGauge() != nil:
				got[mf.GetName()+suffix] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				got[mf.GetName()+suffix] = m.GetCounter().GetValue()
			}
		}
	}
	for name, v := range want {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (present: %v), want %v", name, g, ok, v)
		}
	}
}

// fixedStats is a store whose counts are stats.
type fixedStats struct{ stats store.Stats }

func (s *fixedStats) StatsGet(context.Context) (*store.Stats, error) { return &s.stats, nil }

// TestGaugesFoldStepsPastTheirLimit: past MaxSteps step names, the ready
// tasks of the others are counted under _other, and a step no longer
// ready is reported at zero rather than dropped.
func TestGaugesFoldStepsPastTheirLimit(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	st := &fixedStats{stats: store.Stats{Ready: map[string]int{}}}
	for i := range metrics.MaxSteps + 5 {
		st.stats.Ready[fmt.Sprintf("step%03d", i)] = 1
	}
	gauges, err := metrics.NewGauges(reg, metrics.GaugesConfig{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if err := gauges.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	requireGathered(t, reg, map[string]float64{
		`reprise_tasks_ready{step="step000"}`:               1,
		`reprise_tasks_ready{step="step199"}`:               1,
		`reprise_tasks_ready{step="` + metrics.Other + `"}`: 5,
	})
	st.stats.Ready = map[string]int{"step001": 3}
	if err := gauges.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	requireGathered(t, reg, map[string]float64{
		`reprise_tasks_ready{step="step000"}`:               0,
		`reprise_tasks_ready{step="step001"}`:               3,
		`reprise_tasks_ready{step="` + metrics.Other + `"}`: 0,
	})
}
