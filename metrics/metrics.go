// Package metrics counts what a reprise engine decides, as Prometheus
// metrics: a Collector is a reprise.Observer, and Gauges read what waits
// in the store and in the engine's memory.
package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"reprise"
)

// The limits on distinct label values: values past them are counted under
// Other, so that a stream of new error types or step names cannot grow the
// series without bound.
const (
	MaxErrorTypes = 50
	MaxSteps      = 200
	MaxWorkflows  = 100
	// Other is the label value that values past a limit fold into.
	Other = "_other"
)

// A Collector turns an engine's events into metrics. Set it as the
// engine's Config.Observer.
type Collector struct {
	reprise.NopObserver

	attempts     *prometheus.CounterVec
	retries      *prometheus.CounterVec
	stepsFailed  *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	delay        *prometheus.HistogramVec
	lateness     *prometheus.HistogramVec
	toStart      *prometheus.HistogramVec
	runsFinished *prometheus.CounterVec
	lapsed       prometheus.Counter
	stale        prometheus.Counter

	steps, workflows, errorTypes *capped
}

var _ reprise.Observer = (*Collector)(nil)

// New returns a Collector with its metrics registered on reg.
func New(reg prometheus.Registerer) (*Collector, error) {
	c := &Collector{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_attempts_total",
			Help: "Attempts ended, by step, outcome (ok, retryable, permanent, timeout, worker_lost, cancelled) and error type.",
		}, []string{"step", "outcome", "error_type"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_retries_scheduled_total",
			Help: "Retries the steps' policies scheduled, by step.",
		}, []string{"step"}),
		stepsFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_steps_failed_total",
			Help: "Steps that failed, by step and reason (exhausted, permanent, not_covered, deadline, poison).",
		}, []string{"step", "reason"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "reprise_attempt_duration_seconds",
			Help:    "How long attempts ran, by step.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900},
		}, []string{"step"}),
		delay: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "reprise_retry_delay_seconds",
			Help:    "The delays of the retries scheduled, by step.",
			Buckets: []float64{0, .1, .5, 1, 5, 10, 30, 60, 300, 900, 3600},
		}, []string{"step"}),
		lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "reprise_retry_lateness_seconds",
			Help:    "How long after its planned time a retry started, by step.",
			Buckets: waitBuckets,
		}, []string{"step"}),
		toStart: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "reprise_schedule_to_start_seconds",
			Help:    "How long attempts waited to start from when they were due (step scheduled, retry due), by step.",
			Buckets: waitBuckets,
		}, []string{"step"}),
		runsFinished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_runs_finished_total",
			Help: "Runs that ended, by workflow and status (completed, failed, cancelled).",
		}, []string{"workflow", "status"}),
		lapsed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reprise_leases_lapsed_total",
			Help: "Attempts whose lease lapsed without a result.",
		}),
		stale: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reprise_stale_results_total",
			Help: "Results refused for a stale token or a lapsed lease.",
		}),
		steps:      newCapped(MaxSteps),
		workflows:  newCapped(MaxWorkflows),
		errorTypes: newCapped(MaxErrorTypes),
	}
	for _, m := range []prometheus.Collector{c.attempts, c.retries, c.stepsFailed, c.duration, c.delay, c.lateness,
		c.toStart, c.runsFinished, c.lapsed, c.stale} {
		if err := reg.Register(m); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// waitBuckets are the buckets of the waits before an attempt starts: a
// few milliseconds when workers keep up, minutes when a backlog builds.
var waitBuckets = []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 900, 3600}

// AttemptStarted observes how long the attempt waited to start from when
// it was due, and, for a retry, how late it started.
func (c *Collector) AttemptStarted(a reprise.AttemptInfo) {
	if a.Due.IsZero() || a.Started.IsZero() {
		return
	}
	step := c.steps.value(a.Step)
	wait := max(a.Started.Sub(a.Due), 0).Seconds()
	c.toStart.WithLabelValues(step).Observe(wait)
	if a.Attempt > 1 {
		c.lateness.WithLabelValues(step).Observe(wait)
	}
}

// AttemptEnded counts the attempt, its duration and the decision on it.
func (c *Collector) AttemptEnded(a reprise.AttemptEnd) {
	step := c.steps.value(a.Step)
	errType := ""
	if a.ErrorType != "" {
		errType = c.errorTypes.value(a.ErrorType)
	}
	c.attempts.WithLabelValues(step, string(a.Outcome), errType).Inc()
	c.duration.WithLabelValues(step).Observe(a.Duration.Seconds())
	switch {
	case a.Outcome == reprise.OutcomeOK || a.Outcome == reprise.OutcomeCancelled:
	case a.Retry:
		c.retries.WithLabelValues(step).Inc()
		c.delay.WithLabelValues(step).Observe(a.Delay.Seconds())
	default:
		c.stepsFailed.WithLabelValues(step, string(a.StopReason)).Inc()
	}
}

// LeaseLapsed counts a lapsed lease.
func (c *Collector) LeaseLapsed(reprise.AttemptInfo) { c.lapsed.Inc() }

// StaleResultRefused counts a refused result.
func (c *Collector) StaleResultRefused(reprise.AttemptInfo) { c.stale.Inc() }

// RunEnded counts a run that ended.
func (c *Collector) RunEnded(r reprise.RunEnd) {
	c.runsFinished.WithLabelValues(c.workflows.value(r.Workflow), string(r.Status)).Inc()
}

// capped hands out label values, the first limit distinct ones as they
// are and any later one as Other.
type capped struct {
	limit int
	mu    sync.RWMutex
	seen  map[string]struct{}
}

func newCapped(limit int) *capped { return &capped{limit: limit, seen: make(map[string]struct{})} }

func (c *capped) value(v string) string {
	c.mu.RLock()
	_, ok := c.seen[v]
	c.mu.RUnlock()
	if ok {
		return v
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen[v]; ok {
		return v
	}
	if len(c.seen) >= c.limit {
		return Other
	}
	c.seen[v] = struct{}{}
	return v
}
