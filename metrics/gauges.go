package metrics

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"reprise/store"
)

// Stats is what Gauges reads of a store: a store.Store.
type Stats interface {
	StatsGet(ctx context.Context) (*store.Stats, error)
}

// Resident is what Gauges reads of an engine: a *reprise.Engine.
type Resident interface {
	ResidentRuns() int
}

// GaugesConfig configures Gauges. Store is required; the zero value of
// every other field works.
type GaugesConfig struct {
	// Store is read for the retrying runs and the ready tasks. Required.
	Store Stats
	// Engine is read for the runs it holds in memory, at each scrape (a
	// count under a lock). Default: none, and no reprise_runs_resident.
	Engine Resident
	// Steps are step names reported from the first scrape on, at zero
	// while none of theirs is ready; a step is reported from its first
	// ready task on in any case, and at zero after. Default: none.
	Steps []string
	// Every is how often Run reads the store: scrapes in between, however
	// many, are served the last read and read nothing. Default: 5 s.
	Every time.Duration
	// Timeout limits one read of the store; a read that fails or times
	// out leaves the values of the last one and counts an error.
	// Default: 2 s.
	Timeout time.Duration
}

// Gauges are the metrics of what waits: runs in backoff, tasks ready and
// not claimed, by step, and runs resident in an engine's memory. The
// store's are read by Run, every so often, never by a scrape.
type Gauges struct {
	cfg      GaugesConfig
	retrying *prometheus.Desc
	ready    *prometheus.Desc
	resident *prometheus.Desc
	failures prometheus.Counter
	steps    *capped[string]

	mu    sync.Mutex
	stats store.Stats
	known map[string]bool // the step labels reported so far
}

var _ prometheus.Collector = (*Gauges)(nil)

// NewGauges returns Gauges registered on reg.
func NewGauges(reg prometheus.Registerer, cfg GaugesConfig) (*Gauges, error) {
	var errs []error
	if cfg.Store == nil {
		errs = append(errs, errors.New("metrics: GaugesConfig.Store is required"))
	}
	if cfg.Every < 0 || cfg.Timeout < 0 {
		errs = append(errs, errors.New("metrics: GaugesConfig.Every and Timeout must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Every == 0 {
		cfg.Every = 5 * time.Second
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	g := &Gauges{
		cfg: cfg,
		retrying: prometheus.NewDesc("reprise_runs_retrying",
			"Running runs with a step that waits for its retry (its backoff runs, or it is due and unclaimed).", nil, nil),
		ready: prometheus.NewDesc("reprise_tasks_ready",
			"Tasks ready to start and not claimed, by step.", []string{"step"}, nil),
		resident: prometheus.NewDesc("reprise_runs_resident",
			"Runs this engine holds in memory: the runs whose workflow code it executes.", nil, nil),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reprise_stats_read_errors_total",
			Help: "Reads of the store's counts that failed or timed out; the gauges kept the values read before.",
		}),
		steps: newCapped(MaxSteps, label),
		known: make(map[string]bool),
	}
	for _, s := range cfg.Steps {
		g.known[g.steps.get(s)] = true
	}
	if err := reg.Register(g); err != nil {
		return nil, err
	}
	return g, nil
}

// Describe sends the gauges' descriptions.
func (g *Gauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.retrying
	ch <- g.ready
	if g.cfg.Engine != nil {
		ch <- g.resident
	}
	g.failures.Describe(ch)
}

// Run reads the store at once and then every Every, until ctx ends.
func (g *Gauges) Run(ctx context.Context) error {
	ticker := time.NewTicker(g.cfg.Every)
	defer ticker.Stop()
	for {
		g.Refresh(ctx) //nolint:errcheck // counted in reprise_stats_read_errors_total
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// Refresh reads the store's counts once, within Timeout, for the scrapes
// that follow. A read that fails keeps the values before and counts an
// error.
func (g *Gauges) Refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	stats, err := g.cfg.Store.StatsGet(ctx)
	if err != nil {
		g.failures.Inc()
		return fmt.Errorf("read the store's counts: %w", err)
	}
	g.mu.Lock()
	g.stats = *stats
	g.mu.Unlock()
	return nil
}

// Collect sends the gauges, as the last read of the store left them.
func (g *Gauges) Collect(ch chan<- prometheus.Metric) {
	retrying, ready := g.last()
	ch <- prometheus.MustNewConstMetric(g.retrying, prometheus.GaugeValue, float64(retrying))
	for step, n := range ready {
		ch <- prometheus.MustNewConstMetric(g.ready, prometheus.GaugeValue, float64(n), step)
	}
	if g.cfg.Engine != nil {
		ch <- prometheus.MustNewConstMetric(g.resident, prometheus.GaugeValue, float64(g.cfg.Engine.ResidentRuns()))
	}
	g.failures.Collect(ch)
}

// last returns the counts of the last read of the store. Steps past
// MaxSteps fold into Other; a step reported once stays, at zero.
func (g *Gauges) last() (retrying int, ready map[string]int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ready = make(map[string]int, len(g.known))
	for step := range g.known {
		ready[step] = 0
	}
	for _, step := range slices.Sorted(maps.Keys(g.stats.Ready)) {
		label := g.steps.get(step)
		g.known[label] = true
		ready[label] += g.stats.Ready[step]
	}
	return g.stats.Retrying, ready
}
