package httpapi

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// metrics are the API's counters, registered on Options.Metrics and
// served with everything else on it by GET /metrics.
type metrics struct {
	requests        prometheus.Counter
	runsStarted     prometheus.Counter
	stepsRegistered prometheus.Counter
	tasksClaimed    prometheus.Counter
	tasksCompleted  prometheus.Counter
	tasksFailed     prometheus.Counter
	heartbeats      prometheus.Counter
	leaseConflicts  prometheus.Counter

	gather prometheus.Gatherer
}

// newMetrics registers the API's counters on reg.
func newMetrics(reg *prometheus.Registry) (metrics, error) {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := metrics{
		requests:        counter("reprise_api_requests_total", "HTTP requests received."),
		runsStarted:     counter("reprise_api_runs_started_total", "Runs created through POST /v1/runs."),
		stepsRegistered: counter("reprise_api_steps_registered_total", "Step registrations through POST /v1/steps."),
		tasksClaimed:    counter("reprise_api_tasks_claimed_total", "Attempts claimed by pull workers."),
		tasksCompleted:  counter("reprise_api_tasks_completed_total", "Attempts pull workers completed."),
		tasksFailed:     counter("reprise_api_tasks_failed_total", "Attempts pull workers failed."),
		heartbeats:      counter("reprise_api_heartbeats_total", "Lease heartbeats of pull workers."),
		leaseConflicts: counter("reprise_api_lease_conflicts_total",
			"Worker writes rejected for a stale token or lapsed lease (409)."),
		gather: reg,
	}
	for _, c := range []prometheus.Collector{m.requests, m.runsStarted, m.stepsRegistered, m.tasksClaimed, m.tasksCompleted,
		m.tasksFailed, m.heartbeats, m.leaseConflicts} {
		if err := reg.Register(c); err != nil {
			return metrics{}, err
		}
	}
	return m, nil
}

// serveMetrics writes what the registry holds in the text format, under
// the content type openapi.json promises.
func (a *api) serveMetrics(w http.ResponseWriter, r *http.Request) {
	mfs, err := a.metrics.gather.Gather()
	if err != nil {
		// Gather returns what it could alongside the error: serve that.
		a.log.Warn("gather metrics", "err", err)
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return // the client went away
		}
	}
}
