package reprise_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"reprise"
	"reprise/retry"
	"reprise/sqlite"
	"reprise/store"
)

// startExample runs an engine on a fresh SQLite file until stop is called.
func startExample(defs ...reprise.Definition) (e *reprise.Engine, stop func()) {
	dir, err := os.MkdirTemp("", "reprise-example-")
	if err != nil {
		panic(err)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "example.db"), nil)
	if err != nil {
		panic(err)
	}
	e, err = reprise.New(reprise.Config{Store: st})
	if err != nil {
		panic(err)
	}
	if err := e.Register(defs...); err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.Run(ctx) }()
	return e, func() {
		cancel()
		if err := <-done; err != nil {
			panic(err)
		}
		if err := st.Close(); err != nil {
			panic(err)
		}
		if err := os.RemoveAll(dir); err != nil {
			panic(err)
		}
	}
}

func Example() {
	charge := reprise.NewStep("charge", func(ctx context.Context, cents int) (string, error) {
		info, _ := reprise.StepInfoFrom(ctx)
		if info.Attempt < 2 {
			return "", errors.New("gateway timeout") // retried after its backoff
		}
		return fmt.Sprintf("charged %d", cents), nil
	}, reprise.WithPolicyText("[retry: 3, backoff: 10ms]"))
	order := reprise.NewWorkflow("order", func(ctx context.Context, cents int) (string, error) {
		return reprise.Step(ctx, charge, cents)
	})
	e, stop := startExample(order, charge)
	defer stop()
	out, err := order.Run(context.Background(), e, 1200)
	fmt.Println(out, err)
	// Output: charged 1200 <nil>
}

func ExampleSelect() {
	slow := reprise.NewStep("slow", func(ctx context.Context, _ int) (string, error) {
		<-ctx.Done() // cancelled with ErrStepCancelled when it loses
		return "", context.Cause(ctx)
	})
	wf := reprise.NewWorkflow("deadline", func(ctx context.Context, _ int) (string, error) {
		call := reprise.Go(ctx, slow, 0)
		if reprise.Select(ctx, call, reprise.After(ctx, 20*time.Millisecond)) == 1 {
			return "gave up waiting", nil
		}
		return call.Get(ctx)
	})
	e, stop := startExample(wf, slow)
	defer stop()
	out, err := wf.Run(context.Background(), e, 0)
	if err != nil {
		panic(err)
	}
	fmt.Println(out)
	// Output: gave up waiting
}

func ExampleWaitAny() {
	quote := func(name string) *reprise.StepDef[int, string] {
		return reprise.NewStep(name, func(ctx context.Context, _ int) (string, error) {
			if info, _ := reprise.StepInfoFrom(ctx); name == "south" && info.Attempt == 1 {
				return "", errors.New("busy") // retried 50 ms later
			}
			return name, nil
		}, reprise.WithPolicyText("[retry: 2, backoff: 50ms]"))
	}
	south, north := quote("south"), quote("north")
	// The workflow takes each answer as it comes; none is cancelled.
	wf := reprise.NewWorkflow("as-they-come", func(ctx context.Context, _ int) ([]string, error) {
		pending := []*reprise.Future[string]{reprise.Go(ctx, south, 0), reprise.Go(ctx, north, 0)}
		var got []string
		for len(pending) > 0 {
			fs := make([]reprise.Awaitable, len(pending))
			for i, f := range pending {
				fs[i] = f
			}
			i := reprise.WaitAny(ctx, fs...)
			out, err := pending[i].Get(ctx) // settled: returns at once
			if err != nil {
				return nil, err
			}
			got = append(got, out)
			pending = slices.Delete(pending, i, i+1)
		}
		return got, nil
	})
	e, stop := startExample(wf, south, north)
	defer stop()
	out, err := wf.Run(context.Background(), e, 0)
	if err != nil {
		panic(err)
	}
	fmt.Println(out)
	// Output: [north south]
}

func ExampleWaitSignal() {
	wf := reprise.NewWorkflow("approval", func(ctx context.Context, _ int) (string, error) {
		return reprise.WaitSignal[string](ctx, "approved-by").Get(ctx)
	})
	e, stop := startExample(wf)
	defer stop()
	ctx := context.Background()
	h, err := wf.Start(ctx, e, 0)
	if err != nil {
		panic(err)
	}
	if err := e.SignalRun(ctx, h.ID, "approved-by", "alice"); err != nil {
		panic(err)
	}
	out, err := h.Result(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(out)
	// Output: alice
}

func ExampleContinueAsNew() {
	wf := reprise.NewWorkflow("poller", func(ctx context.Context, n int) (int, error) {
		if n == 3 {
			return n, nil
		}
		if err := reprise.Sleep(ctx, time.Millisecond); err != nil {
			return 0, err
		}
		return 0, reprise.ContinueAsNew(ctx, n+1) // a fresh, short history
	})
	e, stop := startExample(wf)
	defer stop()
	ctx := context.Background()
	h, err := wf.Start(ctx, e, 0)
	if err != nil {
		panic(err)
	}
	out, err := h.Result(ctx)
	if err != nil {
		panic(err)
	}
	run, err := e.GetRun(ctx, h.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println(out, run.Execution)
	// Output: 3 4
}

func ExampleChildRun() {
	var tries int
	provision := reprise.NewWorkflow("provision", func(ctx context.Context, host string) (string, error) {
		tries++
		if tries < 2 {
			return "", errors.New("no capacity")
		}
		return host + " ready", nil
	})
	fleet := reprise.NewWorkflow("fleet", func(ctx context.Context, host string) (string, error) {
		// Each attempt is a fresh child run, retried after a durable backoff.
		return reprise.ChildRun(ctx, provision, host, retry.Attempts(3, retry.Fixed(10*time.Millisecond)))
	})
	e, stop := startExample(fleet, provision)
	defer stop()
	out, err := fleet.Run(context.Background(), e, "db-1")
	fmt.Println(out, err)
	// Output: db-1 ready <nil>
}

func ExampleVersion() {
	audit := reprise.NewStep("audit", func(ctx context.Context, _ int) (string, error) { return "audited", nil })
	wf := reprise.NewWorkflow("versioned", func(ctx context.Context, _ int) (string, error) {
		// Runs started before the audit step existed replay the old branch.
		if reprise.Version(ctx, "add-audit", reprise.DefaultVersion, 1) == 1 {
			return reprise.Step(ctx, audit, 0)
		}
		return "not audited", nil
	})
	e, stop := startExample(wf, audit)
	defer stop()
	out, err := wf.Run(context.Background(), e, 0)
	if err != nil {
		panic(err)
	}
	fmt.Println(out)
	// Output: audited
}

func ExampleEngine_RedriveRun() {
	var fixed bool
	step := reprise.NewStep("import", func(ctx context.Context, _ int) (string, error) {
		if !fixed {
			return "", errors.New("schema mismatch")
		}
		return "imported", nil
	}, reprise.WithPolicy(retry.Never))
	wf := reprise.NewWorkflow("import-job", func(ctx context.Context, _ int) (string, error) {
		return reprise.Step(ctx, step, 0)
	})
	e, stop := startExample(wf, step)
	defer stop()
	ctx := context.Background()
	h, err := wf.Start(ctx, e, 0)
	if err != nil {
		panic(err)
	}
	_, err = h.Result(ctx)
	fmt.Println("first:", err != nil)
	fixed = true // the cause is fixed and deployed
	if err := e.RedriveRun(ctx, h.ID, "ops@example.com"); err != nil {
		panic(err)
	}
	out, err := h.Result(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("after redrive:", out)
	// Output:
	// first: true
	// after redrive: imported
}

func ExampleSaga() {
	reserve := reprise.NewStep("reserve", func(ctx context.Context, item string) (string, error) { return "res-" + item, nil })
	release := reprise.NewStep("release", func(ctx context.Context, res string) (string, error) {
		fmt.Println("released", res)
		return "", nil
	})
	ship := reprise.NewStep("ship", func(ctx context.Context, item string) (string, error) {
		return "", reprise.Permanent(errors.New("address invalid"))
	})
	wf := reprise.NewWorkflow("checkout", func(ctx context.Context, item string) (string, error) {
		var saga reprise.Saga
		res, err := reprise.Step(ctx, reserve, item)
		if err != nil {
			return "", err
		}
		reprise.OnFailure(&saga, release, res, reprise.WithPolicyText("[retry: unlimited, backoff: 10ms, max_backoff: 1s]"))
		if _, err := reprise.Step(ctx, ship, item); err != nil {
			return "compensated", saga.Compensate(ctx)
		}
		return "shipped", nil
	})
	e, stop := startExample(wf, reserve, release, ship)
	defer stop()
	out, err := wf.Run(context.Background(), e, "lamp")
	if err != nil {
		panic(err)
	}
	fmt.Println(out)
	// Output:
	// released res-lamp
	// compensated
}

func ExampleWithRetryIf() {
	errQuota := errors.New("quota exhausted for today")
	call := reprise.NewStep("llm.chat", func(ctx context.Context, prompt string) (string, error) {
		return "", errQuota
	},
		reprise.WithPolicyText("[retry: 5, backoff: 10ms]"),
		// Retrying a spent quota is pointless: stop at once.
		reprise.WithRetryIf(func(err error) bool { return !errors.Is(err, errQuota) }),
	)
	wf := reprise.NewWorkflow("chat", func(ctx context.Context, prompt string) (string, error) {
		return reprise.Step(ctx, call, prompt)
	})
	e, stop := startExample(wf, call)
	defer stop()
	ctx := context.Background()
	h, err := wf.Start(ctx, e, "hello")
	if err != nil {
		panic(err)
	}
	h.Result(ctx) //nolint:errcheck // it fails: its history says how
	events, err := e.History(ctx, h.ID)
	if err != nil {
		panic(err)
	}
	for _, ev := range events {
		if ev.Type == store.EventAttemptFailed {
			fmt.Printf("attempt %d: %s, decided by the %s\n", ev.Attempt, ev.Reason, ev.Rule)
		}
	}
	// Output: attempt 1: permanent, decided by the retry_if predicate
}

func ExampleConfig_poisonAfter() {
	dir, err := os.MkdirTemp("", "reprise-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "example.db"), nil)
	if err != nil {
		panic(err)
	}
	defer st.Close()
	// Every lease of the remote step lapses: its worker dies each time.
	e, err := reprise.New(reprise.Config{Store: st, LeaseTTL: 20 * time.Millisecond, PoisonAfter: 2})
	if err != nil {
		panic(err)
	}
	wf := reprise.NewWorkflow("render", func(ctx context.Context, _ int) (string, error) {
		return reprise.Call[string](ctx, "render.pdf", 0)
	})
	if err := e.Register(wf); err != nil {
		panic(err)
	}
	unlimited := retry.Attempts(retry.Unlimited, retry.None)
	if err := e.RegisterRemoteStep("render.pdf", &unlimited); err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			panic(err)
		}
	}()

	h, err := wf.Start(ctx, e, 0)
	if err != nil {
		panic(err)
	}
	go func() { // a worker that claims and dies, again and again
		poll := time.NewTicker(5 * time.Millisecond)
		defer poll.Stop()
		for {
			e.ClaimTasks(ctx, "crashing-worker", []string{"render.pdf"}, 1) //nolint:errcheck // it dies with what it claimed
			select {
			case <-ctx.Done():
				return
			case <-poll.C:
			}
		}
	}()
	_, err = h.Result(ctx)
	var re *reprise.RunError
	errors.As(err, &re)
	events, err := e.History(ctx, h.ID)
	if err != nil {
		panic(err)
	}
	last := events[len(events)-2] // StepFailed, before RunFailed
	fmt.Println(re.Type, last.Type, last.Error.Type, last.Attempt)
	// Output: Poison StepFailed Poison 2
}
