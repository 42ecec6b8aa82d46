package httpapi

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"reprise"
	"reprise/sqlite"
	"reprise/store"
)

// BenchmarkStartRun: runs started per second through POST /v1/runs, one
// client at a time and from GOMAXPROCS clients.
func BenchmarkStartRun(b *testing.B) {
	s := newTestServer(b, Options{}, echo)
	input := json.RawMessage(`{"n":1}`)
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := s.c.StartRun(b.Context(), "echo", input, ""); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "runs/s")
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, _, err := s.c.StartRun(b.Context(), "echo", input, ""); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "runs/s")
	})
}

// BenchmarkStartFlowRun: runs of a flow started per second through POST
// /v1/runs {"flow": NAME}, one client at a time: each start reads the
// flow's latest version and checks the input against its input_schema.
// Its one pull step waits for a worker that never comes.
func BenchmarkStartFlowRun(b *testing.B) {
	s := newTestServer(b, Options{})
	src := "flow: bench\ninput_schema: {type: object, required: [n]}\nsteps:\n  work:\n    pull: true\n    input: \"{{ input.n }}\"\n"
	if _, _, err := s.c.PushFlow(b.Context(), []byte(src), "application/yaml"); err != nil {
		b.Fatal(err)
	}
	input := json.RawMessage(`{"n":1}`)
	for b.Loop() {
		if _, _, err := s.c.StartFlow(b.Context(), "bench", input, ""); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "runs/s")
}

// BenchmarkPullWorkers: tasks per second through claim and complete, with
// 8 concurrent pull workers taking one task per claim. The runs are
// started before the timer; each worker long-polls.
func BenchmarkPullWorkers(b *testing.B) {
	st, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "reprise.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	// The runs wait for workers that start after them: a bulk load.
	s := serveEngine(b, reprise.Config{Store: st, PollInterval: 50 * time.Millisecond, MaxPendingRuns: -1}, true, Options{}, echo)
	ctx := b.Context()
	if err := s.c.RegisterStep(ctx, Step{Name: "work", Kind: KindPull}); err != nil {
		b.Fatal(err)
	}
	for range b.N {
		if _, _, err := s.c.StartStep(ctx, "work", json.RawMessage(`1`), ""); err != nil {
			b.Fatal(err)
		}
	}
	const workers = 8
	var left atomic.Int64
	left.Store(int64(b.N))
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			name := "bench-" + string(rune('a'+w))
			for left.Load() > 0 {
				tasks, err := s.c.Claim(ctx, ClaimParams{Worker: name, Steps: []string{"work"}, Wait: 100 * time.Millisecond})
				if err != nil {
					b.Error(err)
					return
				}
				for _, t := range tasks {
					if err := s.c.Complete(ctx, t.ID, t.Token, json.RawMessage(`2`)); err != nil {
						b.Error(err)
						return
					}
					left.Add(-1)
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "tasks/s")
}

// BenchmarkHTTPStepLatency: the p99 latency an HTTP step adds over calling
// its endpoint directly. Through the engine, a step's latency is from its
// StepScheduled to its StepCompleted event (scheduling, claim, the call,
// recording the outcome); directly, it is one POST with net/http.
func BenchmarkHTTPStepLatency(b *testing.B) {
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			b.Errorf("read the request: %v", err)
		}
		if _, err := w.Write([]byte(`{"success": true, "output": 1}`)); err != nil {
			b.Errorf("write the answer: %v", err)
		}
	}))
	defer endpoint.Close()
	s := newTestServer(b, Options{})
	ctx := b.Context()
	if err := s.c.RegisterStep(ctx, Step{Name: "web", Kind: KindHTTP, URL: endpoint.URL}); err != nil {
		b.Fatal(err)
	}
	var direct, viaEngine []time.Duration
	for b.Loop() {
		start := time.Now()
		resp, err := http.Post(endpoint.URL, "application/json", strings.NewReader(`{"input": 1}`))
		if err != nil {
			b.Fatal(err)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		direct = append(direct, time.Since(start))

		run, _, err := s.c.StartStep(ctx, "web", json.RawMessage(`1`), "")
		if err != nil {
			b.Fatal(err)
		}
		for !run.Status.Final() {
			if run, err = s.c.WaitRun(ctx, run.ID, 10*time.Second); err != nil {
				b.Fatal(err)
			}
		}
		events, err := s.c.History(ctx, run.ID)
		if err != nil {
			b.Fatal(err)
		}
		var scheduled, completed time.Time
		for _, e := range events {
			switch e.Type {
			case store.EventStepScheduled:
				scheduled = e.At
			case store.EventStepCompleted:
				completed = e.At
			}
		}
		viaEngine = append(viaEngine, completed.Sub(scheduled))
	}
	p99 := func(ds []time.Duration) time.Duration {
		slices.Sort(ds)
		return ds[min(len(ds)-1, len(ds)*99/100)]
	}
	d, e := p99(direct), p99(viaEngine)
	b.ReportMetric(float64(d.Microseconds()), "direct-p99-µs")
	b.ReportMetric(float64(e.Microseconds()), "step-p99-µs")
	b.ReportMetric(float64((e - d).Microseconds()), "added-p99-µs")
}
