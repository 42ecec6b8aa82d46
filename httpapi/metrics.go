package httpapi

import (
	"fmt"
	"net/http"
	"sync/atomic"
)

// metrics are the API's counters, served by GET /metrics in the
// Prometheus text format.
type metrics struct {
	requests        atomic.Int64
	runsStarted     atomic.Int64
	stepsRegistered atomic.Int64
	tasksClaimed    atomic.Int64
	tasksCompleted  atomic.Int64
	tasksFailed     atomic.Int64
	heartbeats      atomic.Int64
	leaseConflicts  atomic.Int64
}

func (a *api) serveMetrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	m := &a.metrics
	for _, c := range []struct {
		name, help string
		v          *atomic.Int64
	}{
		{"reprise_api_requests_total", "HTTP requests received.", &m.requests},
		{"reprise_api_runs_started_total", "Runs created through POST /v1/runs.", &m.runsStarted},
		{"reprise_api_steps_registered_total", "Step registrations through POST /v1/steps.", &m.stepsRegistered},
		{"reprise_api_tasks_claimed_total", "Attempts claimed by pull workers.", &m.tasksClaimed},
		{"reprise_api_tasks_completed_total", "Attempts pull workers completed.", &m.tasksCompleted},
		{"reprise_api_tasks_failed_total", "Attempts pull workers failed.", &m.tasksFailed},
		{"reprise_api_heartbeats_total", "Lease heartbeats of pull workers.", &m.heartbeats},
		{"reprise_api_lease_conflicts_total", "Worker writes rejected for a stale token or lapsed lease (409).", &m.leaseConflicts},
	} {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", c.name, c.help, c.name, c.name, c.v.Load())
	}
}
