package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"reprise"
	"reprise/internal/redact"
	"reprise/postgres"
	"reprise/retry"
	"reprise/store"
)

// The demo's order workflow meets the failures users meet: a flaky network
// call, a call that hangs past its timeout once, and a permanent error that
// the workflow catches and compensates.

type order struct {
	ID      string `json:"id"`
	Item    string `json:"item"`
	Amount  int    `json:"amount_cents"`
	Address string `json:"address"`
}

type receipt struct {
	Order       string `json:"order"`
	Reservation string `json:"reservation"`
	Charge      string `json:"charge"`
	Status      string `json:"status"`
}

// netError is how a connection reset looks to a policy.
type netError struct{ op string }

func (e *netError) Error() string     { return e.op + ": connection reset by peer" }
func (e *netError) ErrorType() string { return "NetworkError" }

type addressError struct{ addr string }

func (e *addressError) Error() string     { return fmt.Sprintf("carrier rejects address %q", e.addr) }
func (e *addressError) ErrorType() string { return "AddressInvalid" }

func attemptOf(ctx context.Context) int {
	info, _ := reprise.StepInfoFrom(ctx)
	return info.Attempt
}

var (
	reserveStep = reprise.NewStep("inventory.reserve", func(ctx context.Context, o order) (string, error) {
		if attemptOf(ctx) < 3 {
			return "", &netError{"POST inventory/reserve"}
		}
		return "res-" + o.ID, nil
	}, reprise.WithPolicy(retry.Attempts(5, retry.Exponential(200*time.Millisecond, 2, 2*time.Second))))

	chargeStep = reprise.NewStep("payments.charge", func(ctx context.Context, o order) (string, error) {
		if attemptOf(ctx) == 1 {
			<-ctx.Done() // the payment provider hangs; the attempt times out
			return "", context.Cause(ctx)
		}
		return fmt.Sprintf("ch-%s-%d", o.ID, o.Amount), nil
	}, reprise.WithPolicy(retry.Attempts(3, retry.Fixed(100*time.Millisecond)).WithTimeout(500*time.Millisecond)))

	shipStep = reprise.NewStep("shipping.create", func(ctx context.Context, o order) (string, error) {
		return "", reprise.Permanent(&addressError{o.Address})
	}, reprise.WithPolicyText("[retry: 3, backoff: 100ms]"))

	refundStep = reprise.NewStep("payments.refund", func(ctx context.Context, charge string) (string, error) {
		return "refunded " + charge, nil
	})

	releaseStep = reprise.NewStep("inventory.release", func(ctx context.Context, res string) (string, error) {
		return "released " + res, nil
	})

	orderWorkflow = reprise.NewWorkflow("order", func(ctx context.Context, o order) (receipt, error) {
		r := receipt{Order: o.ID}
		var err error
		if r.Reservation, err = reprise.Step(ctx, reserveStep, o); err != nil {
			return r, err
		}
		if r.Charge, err = reprise.Step(ctx, chargeStep, o); err != nil {
			return r, err
		}
		_, err = reprise.Step(ctx, shipStep, o)
		var se *reprise.StepError
		if errors.As(err, &se) && se.Reason == retry.ReasonPermanent {
			// Undo what was done, in reverse order; each undo has its own policy.
			if _, err := reprise.Step(ctx, refundStep, r.Charge); err != nil {
				return r, err
			}
			if _, err := reprise.Step(ctx, releaseStep, r.Reservation); err != nil {
				return r, err
			}
			r.Status = "compensated: " + se.Type
			return r, nil
		}
		if err != nil {
			return r, err
		}
		r.Status = "shipped"
		return r, nil
	})
)

// demoDefinitions are the workflows and steps the demo, and any command
// that opens a demo database, registers.
func demoDefinitions() []reprise.Definition {
	return []reprise.Definition{orderWorkflow, reserveStep, chargeStep, shipStep, refundStep, releaseStep}
}

func demoMain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("demo", "[--db PATH] [--json]")
	db := new(string)
	dbVar(fs, db, defaultDB, dbUsage)
	asJSON := fs.Bool("json", false, "print the history as JSON instead of a timeline")
	pos, code, ok := parseArgs(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageErrorf(fs, stderr, "unexpected argument %q", pos[0])
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := openEngineStore(ctx, *db, postgres.Options{})
	if err != nil {
		fmt.Fprintf(stderr, "reprise demo: %v\n", err)
		return exitFail
	}
	defer st.Close()
	e, err := reprise.New(reprise.Config{Store: st})
	if err == nil {
		err = e.Register(demoDefinitions()...)
	}
	if err != nil {
		fmt.Fprintf(stderr, "reprise demo: %v\n", err)
		return exitFail
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintf(stderr, "reprise demo: %v\n", err)
		}
	}()

	fmt.Fprintf(stderr, "reprise demo: running an order workflow on %s; its steps fail the ways real ones do...\n", redact.String(*db))
	o := order{ID: "A-1001", Item: "espresso machine", Amount: 24900, Address: "221B Nowhere St"}
	h, err := orderWorkflow.Start(ctx, e, o)
	if err != nil {
		fmt.Fprintf(stderr, "reprise demo: %v\n", err)
		return exitFail
	}
	waitCtx, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	run, err := e.WaitRun(waitCtx, h.ID)
	if err != nil {
		fmt.Fprintf(stderr, "reprise demo: %v\n", err)
		return exitFail
	}
	events, err := e.History(ctx, h.ID)
	if err != nil {
		fmt.Fprintf(stderr, "reprise demo: %v\n", err)
		return exitFail
	}
	if *asJSON {
		return writeJSON(fs, stdout, stderr, map[string]any{"run": run, "events": events})
	}
	writeTimeline(stdout, run, events)
	shownDB := redact.String(*db)
	fmt.Fprintf(stdout, "\nSee it again with: reprise history %s --db %s\n", run.ID, shownDB)
	fmt.Fprintf(stdout, "Or in a browser: reprise server --db %s, then open http://127.0.0.1:7420/runs/%s\n", shownDB, run.ID)
	if run.Status != store.RunCompleted {
		return exitFail
	}
	return exitOK
}
