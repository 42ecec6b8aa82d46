package httpstep

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"
)

// BenchmarkCall compares Call with a bare http.Post of the same body to the
// same loopback endpoint; the difference is what Call adds (encoding,
// headers, classification, decoding). "direct" and "call" run alone;
// "interleaved" alternates them so that both see the same machine load, and
// reports each one's p50 and p99, the mean added ns and the ratio.
func BenchmarkCall(b *testing.B) {
	srv := serve(b, respond(200, `{"success": true, "output": {"charge": "ch_1", "amount": 42}}`))
	req := request(1)
	body, err := json.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	direct := func() error {
		resp, err := http.Post(srv.URL, "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		return err
	}
	c := newCaller(b, Options{})
	call := func() error {
		_, err := c.Call(b.Context(), srv.URL, req)
		return err
	}

	b.Run("direct", func(b *testing.B) { loop(b, direct) })
	b.Run("call", func(b *testing.B) { loop(b, call) })
	b.Run("interleaved", func(b *testing.B) {
		var d, c []time.Duration
		for b.Loop() {
			d = append(d, timed(b, direct))
			c = append(c, timed(b, call))
		}
		dm, cm := mean(d), mean(c)
		b.ReportMetric(cm-dm, "added-ns/op")
		b.ReportMetric(cm/dm, "call/direct")
		report(b, "direct", d)
		report(b, "call", c)
	})
}

func loop(b *testing.B, op func() error) {
	b.ReportAllocs()
	for b.Loop() {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
}

func timed(b *testing.B, op func() error) time.Duration {
	start := time.Now()
	if err := op(); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

func mean(ds []time.Duration) float64 {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return float64(sum.Nanoseconds()) / float64(len(ds))
}

// report reports the p50 and p99 of latencies as name-p50-ns and name-p99-ns.
func report(b *testing.B, name string, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), name+"-p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), name+"-p99-ns")
}
