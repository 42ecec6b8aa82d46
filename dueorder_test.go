package reprise_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"reprise"
	"reprise/reprisetest"
	"reprise/store"
)

// holdsClaims is a real store whose claims of tasks, once armed, wait for
// release: the dispatcher is caught between seeing work due and claiming it.
type holdsClaims struct {
	store.Store
	armed   chan struct{} // receives once per claim to hold
	entered chan struct{}
	release chan struct{}
}

func (s *holdsClaims) TaskClaim(ctx context.Context, p *store.TaskClaimParams) ([]*store.Task, error) {
	select {
	case <-s.armed:
		s.entered <- struct{}{}
		<-s.release
	default:
	}
	return s.Store.TaskClaim(ctx, p)
}

// TestDueRetryGoesBeforeLaterStarts: a retry that came due while the
// engine had no room is not overtaken by runs started after it came due:
// their first steps queue behind it, even when room frees before the
// dispatcher has claimed the retry.
func TestDueRetryGoesBeforeLaterStarts(t *testing.T) {
	t.Parallel()
	c, db := fakeStore(t)
	st := &holdsClaims{Store: db, armed: make(chan struct{}, 1), entered: make(chan struct{}), release: make(chan struct{})}
	var mu sync.Mutex
	var started []string // "run#attempt", in the order attempts started
	hold := make(chan struct{})
	step := reprise.NewStep("due-step", func(ctx context.Context, name string) (string, error) {
		info, _ := reprise.StepInfoFrom(ctx)
		mu.Lock()
		started = append(started, fmt.Sprintf("%s#%d", name, info.Attempt))
		mu.Unlock()
		switch {
		case name == "retried" && info.Attempt == 1:
			return "", errors.New("first attempt fails")
		case name[0] == 'h':
			select {
			case <-hold:
			case <-ctx.Done():
				return "", context.Cause(ctx)
			}
		}
		return name, nil
	}, reprise.WithPolicyText("[retry: 1, backoff: 1m]"))
	wf := reprise.NewWorkflow("due-one", func(ctx context.Context, name string) (string, error) {
		return reprise.Step(ctx, step, name)
	})
	env := reprisetest.NewOn(t, st, c, &reprise.Config{MaxConcurrentSteps: 1}, wf, step)
	start := func(name string) {
		t.Helper()
		if _, _, err := env.Engine.StartRun(t.Context(), wf.Name(), fmt.Appendf(nil, "%q", name), reprise.WithRunID(name)); err != nil {
			t.Fatal(err)
		}
	}
	attempts := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(started)
	}
	start("retried")
	env.AdvanceUntil(func() bool { return len(attempts()) == 1 })
	env.Settle() // its retry is planned a minute on
	// Held steps take the one slot and every lease the engine may hold
	// (four times its slots); the retry comes due meanwhile.
	for i := range 4 {
		start(fmt.Sprint("h", i))
	}
	c.Advance(2 * time.Minute)
	// One held step ends: room frees, and the dispatcher, about to claim
	// the retry, is held while runs start.
	st.armed <- struct{}{}
	hold <- struct{}{}
	<-st.entered
	for i := range 3 {
		start(fmt.Sprint("new", i))
	}
	close(st.release)
	close(hold)
	for _, id := range []string{"retried", "h0", "h1", "h2", "h3", "new0", "new1", "new2"} {
		if run := env.Wait(id); run.Status != reprise.RunCompleted {
			t.Fatalf("run %s: %s", id, run.Status)
		}
	}
	got := attempts()
	retry := slices.Index(got, "retried#2")
	for i := range 3 {
		if n := slices.Index(got, fmt.Sprint("new", i, "#1")); n < retry {
			t.Errorf("attempts started in the order %v: new%d before the retry due before it started", got, i)
		}
	}
}
