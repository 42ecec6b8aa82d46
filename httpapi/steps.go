package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"reprise"
	"reprise/httpstep"
	"reprise/retry"
)

// The kinds of a step.
const (
	// KindHTTP: the engine POSTs each attempt to the step's URL (SPEC §4).
	KindHTTP = "http"
	// KindPull: workers claim attempts with POST /v1/tasks/claim.
	KindPull = "pull"
	// KindGo: a Go function registered in the server's own code
	// (Options.Steps); it cannot be registered through the API.
	KindGo = "go"
)

// A Step is a step the API knows, as GET /v1/steps lists it and POST
// /v1/steps registers it (there Policy may also be any JSON shape).
type Step struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	URL  string `json:"url,omitempty"`
	// Policy is the step's policy in canonical text form; empty for the
	// engine's default.
	Policy string `json:"policy,omitempty"`
}

// stepRequest is the body of POST /v1/steps: the policy may be text or
// any JSON shape retry.ParseAny takes.
type stepRequest struct {
	Name   string          `json:"name"`
	Kind   string          `json:"kind"`
	URL    string          `json:"url"`
	Policy json.RawMessage `json:"policy"`
}

// step returns the step registered under name, or nil.
func (a *api) step(name string) *Step {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.steps[name]
}

func (a *api) registerStep(w http.ResponseWriter, r *http.Request) {
	var req stepRequest
	if p := decode(w, r, a.opts.MaxBodyBytes, &req); p != nil {
		writeProblem(w, p)
		return
	}
	def, pol, p := checkStep(&req)
	if p != nil {
		writeProblem(w, p)
		return
	}
	existed := a.step(def.Name) != nil
	var err error
	switch def.Kind {
	case KindHTTP:
		var opts []reprise.StepOption
		if pol != nil {
			opts = append(opts, reprise.WithPolicy(*pol))
		}
		err = a.e.Register(reprise.NewRawStep(def.Name, a.httpStep(def.URL), opts...))
	case KindPull:
		err = a.e.RegisterRemoteStep(def.Name, pol)
	}
	if err == nil {
		err = a.addStep(def)
	}
	if err != nil {
		a.internal(w, r, err)
		return
	}
	a.metrics.stepsRegistered.Add(1)
	status := http.StatusCreated
	if existed {
		status = http.StatusOK
	}
	writeJSON(w, status, def)
}

// checkStep validates a registration and parses its policy.
func checkStep(req *stepRequest) (*Step, *retry.Policy, *Problem) {
	if err := checkName(req.Name); err != nil {
		return nil, nil, invalid("name", "step name: %v", err)
	}
	def := &Step{Name: req.Name, Kind: req.Kind, URL: req.URL}
	switch req.Kind {
	case KindHTTP:
		if req.URL == "" {
			return nil, nil, invalid("url", "an http step needs a url")
		}
		if err := httpstep.CheckURL(req.URL); err != nil {
			return nil, nil, invalid("url", "%v", err)
		}
	case KindPull:
		if req.URL != "" {
			return nil, nil, invalid("url", "a pull step has no url; its workers claim its tasks")
		}
	case "":
		return nil, nil, invalid("kind", `give a kind: "http" or "pull"`)
	default:
		return nil, nil, invalid("kind", `kind %q is not "http" or "pull"`, req.Kind)
	}
	pol, err := parsePolicy(req.Policy)
	if err != nil {
		return nil, nil, invalid("policy", "%v", err)
	}
	if pol != nil {
		def.Policy = pol.String()
	}
	return def, pol, nil
}

// checkName reports whether s can name a step: the characters of a run id.
func checkName(s string) error {
	if err := reprise.ValidateRunID(s); err != nil {
		return fmt.Errorf("%s", strings.Replace(err.Error(), "run id", "name", 1))
	}
	return nil
}

// parsePolicy reads a policy given as a JSON string (the text form) or a
// JSON object (any shape retry.ParseAny takes); absent or null is nil.
func parsePolicy(raw json.RawMessage) (*retry.Policy, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	text := string(raw)
	var s string
	if json.Unmarshal(raw, &s) == nil {
		text = s
	}
	p, err := retry.ParseAny(text)
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// httpStep is the function of an HTTP step: one POST per attempt.
func (a *api) httpStep(url string) func(context.Context, json.RawMessage) (json.RawMessage, error) {
	return func(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
		info, _ := reprise.StepInfoFrom(ctx)
		return a.caller.Call(ctx, url, &httpstep.Request{
			RunID: info.RunID, Step: info.Step, Attempt: info.Attempt, IdempotencyKey: info.IdempotencyKey, Input: input,
		})
	}
}

// addStep records def and registers the workflow that runs it as a
// one-step run.
func (a *api) addStep(def *Step) error {
	if err := checkName(def.Name); err != nil {
		return fmt.Errorf("step %q: %w", def.Name, err)
	}
	name := def.Name
	wf := reprise.NewWorkflow(oneStepWorkflow(name), func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
		return reprise.Call[json.RawMessage](ctx, name, in)
	})
	if err := a.e.Register(wf); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.steps[name] = def
	return nil
}

// stepList is the answer of GET /v1/steps.
type stepList struct {
	Steps []*Step `json:"steps"`
}

func (a *api) listSteps(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	out := stepList{Steps: make([]*Step, 0, len(a.steps))}
	for _, def := range a.steps {
		out.Steps = append(out.Steps, def)
	}
	a.mu.Unlock()
	slices.SortFunc(out.Steps, func(x, y *Step) int { return strings.Compare(x.Name, y.Name) })
	writeJSON(w, http.StatusOK, out)
}
