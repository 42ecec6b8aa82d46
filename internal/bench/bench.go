// Package bench holds reprise's workloads for measuring the engine: step
// throughput, retry lateness and the memory of parked runs. Both
// `go test -bench` and `reprise bench` run them, so the figures in
// docs/benchmarks.md come from one place.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"reprise"
	"reprise/retry"
	"reprise/store"
)

// noop is the step of every workload: it fails its first Fail attempts with
// a retryable error, then succeeds.
type stepInput struct {
	Fail int `json:"fail"`
}

// failures counts the planned failures, so RunParked knows when all its
// runs have failed once.
var failures atomic.Int64

var noop = reprise.NewStep("bench.noop", func(ctx context.Context, in stepInput) (int, error) {
	info, _ := reprise.StepInfoFrom(ctx)
	if info.Attempt <= in.Fail {
		failures.Add(1)
		return 0, errors.New("planned failure")
	}
	return info.Attempt, nil
}, reprise.WithPolicy(retry.Attempts(retry.Unlimited, retry.None)))

type runInput struct {
	Fail int `json:"fail"`
	// Policy, when set, is the step's policy in text form.
	Policy string `json:"policy,omitempty"`
}

var oneStep = reprise.NewWorkflow("bench.one-step", func(ctx context.Context, in runInput) (int, error) {
	var opts []reprise.StepOption
	if in.Policy != "" {
		opts = append(opts, reprise.WithPolicyText(in.Policy))
	}
	return reprise.Step(ctx, noop, stepInput{Fail: in.Fail}, opts...)
})

// Definitions are what an engine must register to run the workloads.
func Definitions() []reprise.Definition { return []reprise.Definition{oneStep, noop} }

// Throughput is the result of a throughput workload.
type Throughput struct {
	Runs     int
	Attempts int
	Elapsed  time.Duration
	// Latency percentiles of whole runs, start to result.
	P50, P99 time.Duration
}

// StepsPerSec is completed steps (one per run) per second.
func (t Throughput) StepsPerSec() float64 { return float64(t.Runs) / t.Elapsed.Seconds() }

// AttemptsPerSec counts every attempt, failed ones too.
func (t Throughput) AttemptsPerSec() float64 { return float64(t.Attempts) / t.Elapsed.Seconds() }

func (t Throughput) String() string {
	return fmt.Sprintf("%d runs in %v: %.0f steps/s, %.0f attempts/s, run latency p50 %v p99 %v",
		t.Runs, t.Elapsed.Round(time.Millisecond), t.StepsPerSec(), t.AttemptsPerSec(), t.P50, t.P99)
}

// RunThroughput runs n one-step runs through e, keeping concurrency of them
// in flight; each step fails fail times (zero backoff) before it succeeds.
func RunThroughput(ctx context.Context, e *reprise.Engine, n, concurrency, fail int) (Throughput, error) {
	input, _ := json.Marshal(runInput{Fail: fail})
	var next atomic.Int64
	lat := make([]time.Duration, n)
	errs := make(chan error, concurrency)
	start := time.Now()
	var wg sync.WaitGroup
	for range concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t0 := time.Now()
				run, err := startRun(ctx, e, input)
				if err == nil {
					run, err = e.WaitRun(ctx, run.ID)
				}
				if err == nil && run.Status != store.RunCompleted {
					err = fmt.Errorf("run %s is %s", run.ID, run.Status)
				}
				if err != nil {
					errs <- err
					return
				}
				lat[i] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return Throughput{}, err
	}
	slices.Sort(lat)
	return Throughput{Runs: n, Attempts: n * (fail + 1), Elapsed: elapsed, P50: pct(lat, 50), P99: pct(lat, 99)}, nil
}

// startRun starts a one-step run, as a client should: while the engine is
// busy (reprise.ErrBusy), it tries again a little later.
func startRun(ctx context.Context, e *reprise.Engine, input json.RawMessage) (*reprise.Run, error) {
	for {
		run, _, err := e.StartRun(ctx, oneStep.Name(), input)
		if !errors.Is(err, reprise.ErrBusy) {
			return run, err
		}
		t := time.NewTimer(5 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, context.Cause(ctx)
		case <-t.C:
		}
	}
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}

// Lateness is how late retries started against their planned time, and
// the process's peak resident memory meanwhile.
type Lateness struct {
	Retries       int
	P50, P99, Max time.Duration
	PeakRSS       uint64
}

func (l Lateness) String() string {
	return fmt.Sprintf("%d retries: lateness p50 %v p99 %v max %v; peak resident %.1f MB",
		l.Retries, l.P50, l.P99, l.Max, float64(l.PeakRSS)/1e6)
}

// Retries is an observer, to set in the engine's Config, that keeps how
// late each retry started against its planned time as the engine reports
// them (AttemptInfo's Due and Started, what the metrics' retry lateness
// reads). The lateness workloads read it rather than every run's history,
// reads that would compete with the engine they measure.
type Retries struct {
	reprise.NopObserver
	mu   sync.Mutex
	late []time.Duration
}

// AttemptStarted keeps a retry's lateness.
func (r *Retries) AttemptStarted(a reprise.AttemptInfo) {
	if a.Attempt < 2 || a.Due.IsZero() {
		return
	}
	r.mu.Lock()
	r.late = append(r.late, max(a.Started.Sub(a.Due), 0))
	r.mu.Unlock()
}

// wait waits until n retries have started, and returns their lateness,
// sorted.
func (r *Retries) wait(ctx context.Context, n int) ([]time.Duration, error) {
	for {
		r.mu.Lock()
		if len(r.late) >= n {
			late := slices.Clone(r.late)
			r.mu.Unlock()
			slices.Sort(late)
			return late, nil
		}
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// peakRSS samples the process's resident memory until stop is called, and
// then returns the highest it saw.
func peakRSS() (stop func() uint64) {
	var peak atomic.Uint64
	done := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			peak.Store(max(peak.Load(), rss()))
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() uint64 {
		close(done)
		sampler.Wait()
		return peak.Load()
	}
}

// RunLateness starts n runs whose step fails once and retries after a
// backoff spread by equal jitter over up to spread, and measures from r,
// the engine's observer, how late each retry started.
func RunLateness(ctx context.Context, e *reprise.Engine, r *Retries, n int, spread time.Duration) (Lateness, error) {
	pol := fmt.Sprintf("[retry: 1, backoff: %s, backoff_kind: fixed, jitter: equal]", spread)
	input, _ := json.Marshal(runInput{Fail: 1, Policy: pol})
	stop := peakRSS()
	for range n {
		if _, err := startRun(ctx, e, input); err != nil {
			stop()
			return Lateness{}, err
		}
	}
	late, err := r.wait(ctx, n)
	peak := stop()
	if err != nil || len(late) == 0 {
		return Lateness{}, err
	}
	return Lateness{Retries: len(late), P50: pct(late, 50), P99: pct(late, 99), Max: late[len(late)-1], PeakRSS: peak}, nil
}

// Flood is what a flood of starts did: runs started and starts refused
// as busy, the process's peak resident memory meanwhile, and how late the
// started runs' retries came.
type Flood struct {
	Clients       int
	For           time.Duration
	Started       int
	Refused       int
	PeakRSS       uint64
	P50, P99, Max time.Duration
}

func (f Flood) String() string {
	return fmt.Sprintf("%d clients for %v: %d runs started, %d starts refused as busy, peak resident %.1f MB; "+
		"retry lateness p50 %v p99 %v max %v",
		f.Clients, f.For, f.Started, f.Refused, float64(f.PeakRSS)/1e6, f.P50, f.P99, f.Max)
}

// RunFlood has clients start runs as fast as they can for d, each run's
// step failing once and retried after 1 s, a client that finds the engine
// busy trying again 5 ms later; it then waits for the retries of every run
// started, which r, the engine's observer, reports.
func RunFlood(ctx context.Context, e *reprise.Engine, r *Retries, clients int, d time.Duration) (Flood, error) {
	input, _ := json.Marshal(runInput{Fail: 1, Policy: "[retry: 1, backoff: 1s]"})
	f := Flood{Clients: clients, For: d}
	var started, refused atomic.Int64
	stop := peakRSS()
	deadline := time.Now().Add(d)
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				_, _, err := e.StartRun(ctx, oneStep.Name(), input)
				switch {
				case errors.Is(err, reprise.ErrBusy):
					refused.Add(1)
					select {
					case <-ctx.Done():
						errs <- context.Cause(ctx)
						return
					case <-time.After(5 * time.Millisecond):
					}
				case err != nil:
					errs <- err
					return
				default:
					started.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		stop()
		return Flood{}, err
	}
	late, err := r.wait(ctx, int(started.Load()))
	f.PeakRSS = stop()
	if err != nil {
		return Flood{}, err
	}
	f.Started, f.Refused = int(started.Load()), int(refused.Load())
	if len(late) > 0 {
		f.P50, f.P99, f.Max = pct(late, 50), pct(late, 99), late[len(late)-1]
	}
	return f, nil
}

// SleepJitter measures how late the machine itself wakes a goroutine: n
// sleeps of 1 ms, each against its planned end. A retry cannot start
// earlier than its engine is woken, so this is the floor under retry
// lateness; on a shared virtual machine it is far from zero.
func SleepJitter(n int) (p50, p99, most time.Duration) {
	late := make([]time.Duration, n)
	for i := range late {
		start := time.Now()
		time.Sleep(time.Millisecond)
		late[i] = time.Since(start) - time.Millisecond
	}
	slices.Sort(late)
	return pct(late, 50), pct(late, 99), late[n-1]
}

// Parked is the memory cost of runs waiting in backoff.
type Parked struct {
	Runs      int
	HeapBytes uint64
	RSSBytes  uint64
}

func (p Parked) String() string {
	return fmt.Sprintf("%d runs parked in backoff: heap %.1f MB, resident %.1f MB",
		p.Runs, float64(p.HeapBytes)/1e6, float64(p.RSSBytes)/1e6)
}

// RunParked starts n runs whose step fails and backs off for an hour, waits
// until every one is parked (no lease held in st, e's store), and measures
// the process's memory.
func RunParked(ctx context.Context, e *reprise.Engine, st store.Store, n int) (Parked, error) {
	input, _ := json.Marshal(runInput{Fail: 1, Policy: "[retry: 1, backoff: 1h]"})
	base := failures.Load()
	for range n {
		if _, err := startRun(ctx, e, input); err != nil {
			return Parked{}, err
		}
	}
	// Parked means: every step has failed once, and no lease is held.
	for {
		w, err := st.NextWake(ctx, &store.NextWakeParams{})
		if err != nil {
			return Parked{}, err
		}
		if failures.Load()-base >= int64(n) && w.Lease.IsZero() {
			break
		}
		select {
		case <-ctx.Done():
			return Parked{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	// Count what the parked runs hold, not what earlier work freed and the
	// runtime has yet to give back.
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return Parked{Runs: n, HeapBytes: ms.HeapInuse, RSSBytes: rss()}, nil
}

// rss reads the process's resident set size on Linux, or 0.
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}
