package metrics

import "github.com/prometheus/client_golang/prometheus"

// AttemptsVec is reprise_attempts_total, for tests.
func (c *Collector) AttemptsVec() *prometheus.CounterVec { return c.attempts }
