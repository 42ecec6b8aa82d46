// Package metrics counts what a reprise engine decides, as Prometheus
// metrics: a Collector is a reprise.Observer, and Gauges read what waits
// in the store and in the engine's memory.
package metrics

import (
	"sync"
	"sync/atomic"

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

	steps      *capped[*stepMetrics]
	workflows  *capped[*workflowMetrics]
	errorTypes *capped[string]
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
		steps:      newCapped(MaxSteps, newStepMetrics),
		workflows:  newCapped(MaxWorkflows, newWorkflowMetrics),
		errorTypes: newCapped(MaxErrorTypes, label),
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
	m := c.steps.get(a.Step)
	wait := max(a.Started.Sub(a.Due), 0).Seconds()
	m.toStart.of(c.toStart, m.label).Observe(wait)
	if a.Attempt > 1 {
		m.lateness.of(c.lateness, m.label).Observe(wait)
	}
}

// AttemptEnded counts the attempt, its duration and the decision on it.
func (c *Collector) AttemptEnded(a reprise.AttemptEnd) {
	m := c.steps.get(a.Step)
	errType := ""
	if a.ErrorType != "" {
		errType = c.errorTypes.get(a.ErrorType)
	}
	m.attempts.of([2]string{string(a.Outcome), errType}, func(k [2]string) prometheus.Counter {
		return c.attempts.WithLabelValues(m.label, k[0], k[1])
	}).Inc()
	m.duration.of(c.duration, m.label).Observe(a.Duration.Seconds())
	switch {
	case a.Outcome == reprise.OutcomeOK || a.Outcome == reprise.OutcomeCancelled:
	case a.Retry:
		m.retries.of(c.retries, m.label).Inc()
		m.delay.of(c.delay, m.label).Observe(a.Delay.Seconds())
	default:
		c.stepsFailed.WithLabelValues(m.label, string(a.StopReason)).Inc() // once a step, not an attempt
	}
}

// LeaseLapsed counts a lapsed lease.
func (c *Collector) LeaseLapsed(reprise.AttemptInfo) { c.lapsed.Inc() }

// StaleResultRefused counts a refused result.
func (c *Collector) StaleResultRefused(reprise.AttemptInfo) { c.stale.Inc() }

// RunEnded counts a run that ended.
func (c *Collector) RunEnded(r reprise.RunEnd) {
	m := c.workflows.get(r.Workflow)
	m.finished.of(r.Status, func(s reprise.RunStatus) prometheus.Counter {
		return c.runsFinished.WithLabelValues(m.label, string(s))
	}).Inc()
}

// A stepMetrics holds the series of one step label, each made when first
// counted (as WithLabelValues makes it): where WithLabelValues hashes
// and compares the label values on each call, these are looked up once.
type stepMetrics struct {
	label                              string
	toStart, lateness, duration, delay series[prometheus.Observer]
	retries                            series[prometheus.Counter]
	// attempts are the step's series of reprise_attempts_total, by
	// outcome and error type (a capped label).
	attempts counters[[2]string]
}

func newStepMetrics(label string) *stepMetrics { return &stepMetrics{label: label} }

// A workflowMetrics holds the series of one workflow label:
// reprise_runs_finished_total's, by status.
type workflowMetrics struct {
	label    string
	finished counters[reprise.RunStatus]
}

func newWorkflowMetrics(label string) *workflowMetrics { return &workflowMetrics{label: label} }

// counters are the series of a vector for one step or workflow, by their
// other labels (K), each made when first counted.
type counters[K comparable] struct {
	mu sync.RWMutex
	m  map[K]prometheus.Counter
}

// of returns the series for k, made if it is the first time.
func (c *counters[K]) of(k K, made func(K) prometheus.Counter) prometheus.Counter {
	c.mu.RLock()
	ctr, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return ctr
	}
	ctr = made(k)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[K]prometheus.Counter)
	}
	c.m[k] = ctr
	return ctr
}

// A series is a step's series of a vector labelled by step alone, made
// when first used.
type series[T any] struct{ p atomic.Pointer[T] }

// of returns the series of vec for label. Two goroutines may both make
// it: WithLabelValues returns the same one.
func (s *series[T]) of(vec interface{ WithLabelValues(...string) T }, label string) T {
	if p := s.p.Load(); p != nil {
		return *p
	}
	v := vec.WithLabelValues(label)
	s.p.Store(&v)
	return v
}

// capped hands out what belongs to label values (made by of): the first
// limit distinct values each have their own, any later one Other's.
type capped[T any] struct {
	limit int
	of    func(label string) T
	mu    sync.RWMutex
	seen  map[string]T
	other T
}

func newCapped[T any](limit int, of func(label string) T) *capped[T] {
	return &capped[T]{limit: limit, of: of, seen: make(map[string]T), other: of(Other)}
}

// label is the of of a capped that hands out the label values themselves.
func label(v string) string { return v }

func (c *capped[T]) get(v string) T {
	c.mu.RLock()
	x, ok := c.seen[v]
	c.mu.RUnlock()
	if ok {
		return x
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if x, ok := c.seen[v]; ok {
		return x
	}
	if len(c.seen) >= c.limit {
		return c.other
	}
	x = c.of(v)
	c.seen[v] = x
	return x
}
