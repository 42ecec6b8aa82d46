package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"reprise/store"
)

// TestServerMetrics: after a run, the server's /metrics holds the
// engine's metrics, the API's counters and the runtime's, from one
// registry.
func TestServerMetrics(t *testing.T) {
	t.Parallel()
	url := startServer(t)
	c := newClient(t, url)
	input := json.RawMessage(`{"id":"A-1","item":"mug","amount_cents":900,"address":"x"}`)
	if _, _, err := c.StartRun(t.Context(), "order", input, "m1"); err != nil {
		t.Fatal(err)
	}
	if r := waitRun(t, c, "m1"); r.Status != store.RunCompleted {
		t.Fatalf("order run: %+v", r)
	}
	// The run's end is observed just after the store records it.
	var body []byte
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		resp, err := http.Get(url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
		}
		if strings.Contains(string(body), "reprise_runs_finished_total{") || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range []string{
		`reprise_runs_finished_total{status="completed",workflow="order"} 1` + "\n",
		`reprise_attempts_total{error_type="",outcome="ok",step="inventory.reserve"} 1` + "\n",
		`reprise_attempts_total{error_type="NetworkError",outcome="retryable",step="inventory.reserve"} 2` + "\n",
		`reprise_retries_scheduled_total{step="inventory.reserve"} 2` + "\n",
		`reprise_attempt_duration_seconds_count{step="inventory.reserve"} 3` + "\n",
		"reprise_api_runs_started_total 1\n",
		"# TYPE reprise_leases_lapsed_total counter\n",
		"# TYPE go_goroutines gauge\n",
		"# TYPE process_cpu_seconds_total counter\n",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	// The scrape parses, and holds the waits and the gauges.
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	for name, typ := range map[string]string{
		"reprise_schedule_to_start_seconds": "HISTOGRAM",
		"reprise_retry_lateness_seconds":    "HISTOGRAM",
		"reprise_runs_retrying":             "GAUGE",
		"reprise_tasks_ready":               "GAUGE",
		"reprise_runs_resident":             "GAUGE",
		"reprise_stats_read_errors_total":   "COUNTER",
	} {
		mf := families[name]
		if mf == nil || mf.GetType().String() != typ || len(mf.GetMetric()) == 0 {
			t.Errorf("/metrics family %s = %v, want a %s with samples", name, mf, typ)
		}
	}
	if n := families["reprise_retry_lateness_seconds"].GetMetric()[0].GetHistogram().GetSampleCount(); n != 2 {
		t.Errorf("reprise_retry_lateness_seconds counted %d retries, want the 2 of inventory.reserve", n)
	}
}
