package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"reprise"
	"reprise/httpstep"
	"reprise/retry"
)

// Options say how an engine runs flows.
type Options struct {
	// Caller makes the HTTP steps' calls. Default: one made by
	// httpstep.New with its defaults.
	Caller *httpstep.Caller
}

// Definitions returns what Engine.Register needs for the runs of f: its
// workflow (Flow.Workflow) and one step for each of its HTTP steps
// (Flow.EngineStep). Pull steps are registered with RegisterRemoteStep
// (Register does both); a step of kind step is the program's to register.
//
// An HTTP step's input carries the URL of the flow's version the run
// started with, so the same definitions serve every version of a flow
// whose steps have the same names.
func Definitions(f *Flow, opts *Options) ([]reprise.Definition, error) {
	caller, err := opts.caller()
	if err != nil {
		return nil, err
	}
	defs := []reprise.Definition{reprise.NewWorkflow(f.Workflow(), execute)}
	for _, s := range f.Steps {
		if s.Kind == KindHTTP {
			defs = append(defs, reprise.NewRawStep(f.EngineStep(s), httpCall(caller)))
		}
	}
	return defs, nil
}

// Register registers with e everything the runs of f need but the steps
// of kind step: the workflow, the HTTP steps, and the pull steps as
// remote steps with the engine's default policy (each call gives the
// step's own). A program that runs several flows, or versions, uses a
// Set.
func Register(e *reprise.Engine, f *Flow, opts *Options) error {
	return NewSet(e, opts).Add(f, 1)
}

func (o *Options) caller() (*httpstep.Caller, error) {
	if o != nil && o.Caller != nil {
		return o.Caller, nil
	}
	return httpstep.New(httpstep.Options{})
}

// CheckInput reports whether input (JSON; empty for none) is one a run of
// f accepts: JSON, and matching the flow's input_schema if it has one.
func (f *Flow) CheckInput(input json.RawMessage) error {
	if len(input) > 0 && !json.Valid(input) {
		return errors.New("input is not JSON")
	}
	if f.schema != nil {
		return f.schema.check(input)
	}
	return nil
}

// Start checks input and starts a run of f with it. created is false
// when a run of the id chosen (reprise.WithRunID) existed already: that
// run is returned, and nothing new starts.
func Start(ctx context.Context, e *reprise.Engine, f *Flow, input json.RawMessage, opts ...reprise.RunOption) (run *reprise.Run, created bool, err error) {
	if err := f.CheckInput(input); err != nil {
		return nil, false, err
	}
	in, err := json.Marshal(RunInput{Flow: f.canonical, Input: input})
	if err != nil {
		return nil, false, fmt.Errorf("start flow %s: %w", f.Name, err)
	}
	return e.StartRun(ctx, f.Workflow(), in, opts...)
}

// httpCall is the function of a flow's HTTP step: one POST per attempt
// to the URL its input carries.
func httpCall(c *httpstep.Caller) func(context.Context, json.RawMessage) (json.RawMessage, error) {
	return func(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
		var in httpInput
		if err := json.Unmarshal(raw, &in); err != nil || in.URL == "" {
			return nil, retry.Permanent(fmt.Errorf("the input of a flow's HTTP step has no url: %s", raw))
		}
		info, _ := reprise.StepInfoFrom(ctx)
		return c.Call(ctx, in.URL, httpstep.StepRequest(info, in.Input))
	}
}
