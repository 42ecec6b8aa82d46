package reprise_test

import (
	"context"
	"sync"
	"testing"

	"reprise"
)

// activityLog records EngineBusy (-1) and EngineIdle (its steps) in order.
type activityLog struct {
	reprise.NopObserver
	mu    sync.Mutex
	calls []int
}

func (o *activityLog) EngineBusy() { o.add(-1) }

func (o *activityLog) EngineIdle(steps int) { o.add(steps) }

func (o *activityLog) add(c int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, c)
}

// last returns the last call, and whether there was one.
func (o *activityLog) last() (int, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.calls) == 0 {
		return 0, false
	}
	return o.calls[len(o.calls)-1], true
}

// TestObserverHearsIdleAroundStepCode: while the run's one step is inside
// its code and the engine has nothing else to do, the engine is idle with
// one attempt in step code; once the run ended, idle with none. Busy and
// idle alternate from the start, busy first.
func TestObserverHearsIdleAroundStepCode(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	hold := reprise.NewStep("hold", func(ctx context.Context, n int) (int, error) {
		select {
		case <-release:
			return n, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	})
	wf := reprise.NewWorkflow("held", func(ctx context.Context, n int) (int, error) {
		return reprise.Step(ctx, hold, n)
	})
	obs := &activityLog{}
	env := newEnv(t, &reprise.Config{Observer: obs}, wf, hold)
	h, err := wf.Start(t.Context(), env.Engine, 1)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { c, ok := obs.last(); return ok && c == 1 })
	close(release)
	env.Wait(h.ID)
	env.Settle()
	if c, _ := obs.last(); c != 0 {
		t.Errorf("last call %d, want EngineIdle(0) once the run ended", c)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	for i, c := range obs.calls {
		if busy := i%2 == 0; busy != (c < 0) {
			t.Fatalf("calls %v: call %d is not the turn of EngineBusy (-1) and EngineIdle (steps) in alternation", obs.calls, i)
		}
	}
}

// runEnds records RunEnded.
type runEnds struct {
	reprise.NopObserver
	mu   sync.Mutex
	ends map[string]reprise.RunStatus
}

func (o *runEnds) RunEnded(r reprise.RunEnd) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ends == nil {
		o.ends = map[string]reprise.RunStatus{}
	}
	o.ends[r.RunID] = r.Status
}

func (o *runEnds) status(id string) (reprise.RunStatus, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s, ok := o.ends[id]
	return s, ok
}
