package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"reprise"
	"reprise/httpstep"
	"reprise/internal/redact"
	"reprise/retry"
	"reprise/store"
)

// Steps registered through the API are step definitions kept in the
// engine's store (reprise.StepDefStore), versioned: every server on one
// database serves the same ones, and a restart loses none. A server keeps
// what it has read of them in memory:
//
//   - it reads them all when the handler is made, and registers them on its
//     engine, so that runs waiting for them go on without a registration;
//   - a request that names a step it does not know (a run start, a claim,
//     GET /v1/steps/{name}) reads that step from the store, and GET
//     /v1/steps reads them all, so that a step registered on another
//     server is known here from its first mention;
//   - scheduling a step reads its current version from the store each time
//     (the engine does, see reprise.Engine.RegisterStepDefinition), so a
//     re-registration on any server applies to every step scheduled after
//     it, on every server;
//   - an attempt of an HTTP step goes to the URL of the version its step
//     was scheduled under (reprise.StepInfo.StepVersion), read once per
//     version: versions never change.

// loadTimeout bounds NewHandler's read of the stored steps.
const loadTimeout = 30 * time.Second

// The kinds of a step.
const (
	// KindHTTP: the engine POSTs each attempt to the step's URL (docs/http-steps.md).
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
	// Version is the version of the step's definition (from 1; each
	// registration that changes it adds one); 0 for a Go step.
	Version int `json:"version,omitempty"`
	// URL is an HTTP step's, with its credentials (userinfo, secret query
	// values such as token= or api_key=) shown as "xxxxx".
	URL string `json:"url,omitempty"`
	// Policy is the step's policy in canonical text form; empty for the
	// engine's default.
	Policy string `json:"policy,omitempty"`
	// CreatedAt is when this version was registered; zero for a Go step.
	CreatedAt time.Time `json:"created_at,omitzero"`
}

// wireStep is a stored definition as the API shows it.
func wireStep(def *store.StepDefinition) *Step {
	return &Step{Name: def.Name, Kind: def.Kind, Version: def.Version, URL: redact.String(def.URL), Policy: def.Policy,
		CreatedAt: def.CreatedAt}
}

// stepVersion names one version of a step.
type stepVersion struct {
	name    string
	version int
}

// stepRequest is the body of POST /v1/steps: the policy may be text or
// any JSON shape retry.ParseAny takes.
type stepRequest struct {
	Name   string          `json:"name"`
	Kind   string          `json:"kind"`
	URL    string          `json:"url"`
	Policy json.RawMessage `json:"policy"`
}

// step returns the step of the name: a Go step, or the current version
// of a stored one, read from the store if this server does not know it
// yet (or its engine found it deleted); nil if there is none.
func (a *api) step(ctx context.Context, name string) (*Step, error) {
	a.mu.Lock()
	s := a.steps[name]
	a.mu.Unlock()
	if s != nil && (s.Kind == KindGo || a.e.StepDefinitionVersion(name) > 0) {
		return s, nil
	}
	return a.reloadStep(ctx, name)
}

// reloadStep reads the current version of a stored step and registers it,
// or forgets the step if it has none; nil then.
func (a *api) reloadStep(ctx context.Context, name string) (*Step, error) {
	if a.isGoStep(name) {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.steps[name], nil // nil for one not in Options.Steps
	}
	def, err := a.st.StepDefGet(ctx, &store.StepDefGetParams{Name: name})
	if errors.Is(err, store.ErrNotFound) {
		a.forgetStep(name)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return a.adopt(def)
}

// isGoStep reports whether name is a Go step of this server.
func (a *api) isGoStep(name string) bool {
	a.mu.Lock()
	s := a.steps[name]
	a.mu.Unlock()
	return (s != nil && s.Kind == KindGo) || a.e.HasGoStep(name)
}

// loadSteps registers every stored step on the engine; a stored step of
// a Go step's name is left out (and logged): the Go step wins.
func (a *api) loadSteps(ctx context.Context) error {
	defs, err := a.st.StepDefList(ctx, &store.StepDefListParams{})
	if err != nil {
		return fmt.Errorf("load steps: %w", err)
	}
	for _, def := range defs {
		if a.isGoStep(def.Name) {
			a.log.Warn("a step registered through the API has the name of a Go step of this server; the Go step runs",
				"step", def.Name, "version", def.Version)
			continue
		}
		if _, err := a.adopt(def); err != nil {
			return fmt.Errorf("load steps: %w", err)
		}
	}
	return nil
}

// adopt registers version def of a stored step on the engine, and the
// workflow that runs it as a one-step run, unless this server knows a
// later version. It returns the step as this server knows it.
func (a *api) adopt(def *store.StepDefinition) (*Step, error) {
	a.mu.Lock()
	known := a.steps[def.Name]
	a.mu.Unlock()
	if known != nil && known.Kind != KindGo && known.Version >= def.Version && a.e.StepDefinitionVersion(def.Name) > 0 {
		return known, nil
	}
	var run func(context.Context, json.RawMessage) (json.RawMessage, error)
	if def.Kind == KindHTTP {
		run = a.httpStep(def.Name)
	}
	if err := a.e.RegisterStepDefinition(def, run); err != nil {
		return nil, err
	}
	if known == nil {
		name := def.Name
		wf := reprise.NewWorkflow(oneStepWorkflow(name), func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
			return reprise.Call[json.RawMessage](ctx, name, in)
		})
		if err := a.e.Register(wf); err != nil {
			return nil, err
		}
	}
	s := wireStep(def)
	a.mu.Lock()
	defer a.mu.Unlock()
	if cur := a.steps[def.Name]; cur != nil && cur.Version > s.Version {
		return cur, nil // a later one came meanwhile
	}
	a.steps[def.Name] = s
	if def.Kind == KindHTTP {
		a.urls[stepVersion{def.Name, def.Version}] = def.URL
	}
	return s, nil
}

// forgetStep unregisters a stored step from the engine. The one-step
// workflow stays: a run of it schedules the step, which waits for a new
// registration.
func (a *api) forgetStep(name string) {
	a.mu.Lock()
	if s := a.steps[name]; s != nil && s.Kind != KindGo {
		delete(a.steps, name)
	}
	a.mu.Unlock()
	a.e.UnregisterStepDefinition(name)
}

// addGoStep records a Go step of the server, and registers the workflow
// that runs it as a one-step run.
func (a *api) addGoStep(name string) error {
	if err := checkName(name); err != nil {
		return fmt.Errorf("step %q: %w", name, err)
	}
	wf := reprise.NewWorkflow(oneStepWorkflow(name), func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
		return reprise.Call[json.RawMessage](ctx, name, in)
	})
	if err := a.e.Register(wf); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.steps[name] = &Step{Name: name, Kind: KindGo}
	return nil
}

// conflict is a 409 about a step.
func conflict(field, format string, args ...any) *Problem {
	return &Problem{Type: ProblemStepConflict, Title: "Conflict", Status: http.StatusConflict,
		Detail: fmt.Sprintf(format, args...), Field: field}
}

func (a *api) registerStep(w http.ResponseWriter, r *http.Request) {
	var req stepRequest
	if p := decode(w, r, a.opts.MaxBodyBytes, &req); p != nil {
		writeProblem(w, p)
		return
	}
	policy, p := checkStep(&req)
	if p == nil && req.Kind == KindHTTP {
		if err := a.caller.CheckTarget(r.Context(), req.URL); err != nil {
			p = invalid("url", "%v", err)
		}
	}
	if p == nil && a.isGoStep(req.Name) {
		p = conflict("name", "step %q is a Go step of this server; it cannot be registered or replaced through the API", req.Name)
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	def, created, err := a.st.StepDefine(r.Context(), &store.StepDefineParams{
		Name: req.Name, Kind: req.Kind, URL: req.URL, Policy: policy,
	})
	if errors.Is(err, store.ErrStepKindChanged) {
		writeProblem(w, conflict("kind", "%v; delete it (DELETE /v1/steps/%s) when no run needs it, then register it again",
			err, req.Name))
		return
	}
	if err != nil {
		a.internal(w, r, err)
		return
	}
	s, err := a.adopt(def)
	if err != nil {
		a.internal(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		a.metrics.stepsRegistered.Inc()
	}
	w.Header().Set("Location", "/v1/steps/"+s.Name)
	writeJSON(w, status, s)
}

// checkStep validates a registration, and returns its policy in canonical
// text form ("" for none).
func checkStep(req *stepRequest) (policy string, p *Problem) {
	if err := checkName(req.Name); err != nil {
		return "", invalid("name", "step name: %v", err)
	}
	switch req.Kind {
	case KindHTTP:
		if req.URL == "" {
			return "", invalid("url", "an http step needs a url")
		}
		if err := httpstep.CheckURL(req.URL); err != nil {
			return "", invalid("url", "%v", err)
		}
	case KindPull:
		if req.URL != "" {
			return "", invalid("url", "a pull step has no url; its workers claim its tasks")
		}
	case KindGo:
		return "", invalid("kind", `kind "go" is for the server's own Go steps; register "http" or "pull"`)
	case "":
		return "", invalid("kind", `give a kind: "http" or "pull"`)
	default:
		return "", invalid("kind", `kind %q is not "http" or "pull"`, req.Kind)
	}
	pol, err := parsePolicy(req.Policy)
	if err != nil {
		return "", invalid("policy", "%v", err)
	}
	if pol != nil {
		policy = pol.String()
	}
	return policy, nil
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

// httpStep is the function of an HTTP step: one POST per attempt, to the
// URL of the version the step was scheduled under.
func (a *api) httpStep(name string) func(context.Context, json.RawMessage) (json.RawMessage, error) {
	return func(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
		info, _ := reprise.StepInfoFrom(ctx)
		target, err := a.stepURL(ctx, name, info.StepVersion)
		if err != nil {
			return nil, err
		}
		return a.caller.Call(ctx, target, httpstep.StepRequest(info, input))
	}
}

// stepURL returns the URL of version v of an HTTP step, or for v 0 (a
// step scheduled by an engine that did not know the step's definition)
// the current version's.
func (a *api) stepURL(ctx context.Context, name string, v int) (string, error) {
	a.mu.Lock()
	u, ok := a.urls[stepVersion{name, v}]
	a.mu.Unlock()
	if ok {
		return u, nil
	}
	def, err := a.st.StepDefGet(ctx, &store.StepDefGetParams{Name: name, Version: v})
	switch {
	case errors.Is(err, store.ErrNotFound) && v == 0:
		return "", retry.Permanent(fmt.Errorf("step %s has no definition: register it with POST /v1/steps", name))
	case errors.Is(err, store.ErrNotFound):
		return "", retry.Permanent(fmt.Errorf("step %s has no version %d", name, v))
	case err != nil:
		return "", err
	case def.Kind != KindHTTP:
		return "", retry.Permanent(fmt.Errorf("step %s version %d is a %s step, not an http step", name, def.Version, def.Kind))
	}
	if v != 0 {
		a.mu.Lock()
		a.urls[stepVersion{name, v}] = def.URL
		a.mu.Unlock()
	}
	return def.URL, nil
}

// stepList is the answer of GET /v1/steps.
type stepList struct {
	Steps []*Step `json:"steps"`
}

// listSteps answers the Go steps and the stored ones, read from the
// store; a step this server did not know is registered on its engine, and
// one deleted is forgotten.
func (a *api) listSteps(w http.ResponseWriter, r *http.Request) {
	defs, err := a.st.StepDefList(r.Context(), &store.StepDefListParams{})
	if err != nil {
		a.internal(w, r, err)
		return
	}
	out := stepList{Steps: make([]*Step, 0, len(defs))}
	listed := make(map[string]bool, len(defs))
	for _, def := range defs {
		if a.isGoStep(def.Name) {
			continue // the Go step wins
		}
		listed[def.Name] = true
		if _, err := a.adopt(def); err != nil {
			a.internal(w, r, err)
			return
		}
		out.Steps = append(out.Steps, wireStep(def))
	}
	a.mu.Lock()
	var gone []string
	for name, s := range a.steps {
		switch {
		case s.Kind == KindGo:
			out.Steps = append(out.Steps, s)
		case !listed[name]:
			gone = append(gone, name)
		}
	}
	a.mu.Unlock()
	for _, name := range gone {
		a.forgetStep(name)
	}
	slices.SortFunc(out.Steps, func(x, y *Step) int { return strings.Compare(x.Name, y.Name) })
	writeJSON(w, http.StatusOK, out)
}

// stepName reads the {name} of a step's path.
func stepName(w http.ResponseWriter, r *http.Request) (string, bool) {
	name := r.PathValue("name")
	if err := checkName(name); err != nil {
		writeProblem(w, invalid("name", "step name: %v", err))
		return "", false
	}
	return name, true
}

// getStep answers GET /v1/steps/{name}[?version=N].
func (a *api) getStep(w http.ResponseWriter, r *http.Request) {
	name, ok := stepName(w, r)
	if !ok {
		return
	}
	version, ok := queryVersion(w, r)
	if !ok {
		return
	}
	if a.isGoStep(name) {
		if version != 0 {
			writeProblem(w, notFound("step %q is a Go step of this server; it has no versions", name))
			return
		}
		writeJSON(w, http.StatusOK, &Step{Name: name, Kind: KindGo})
		return
	}
	if version == 0 {
		s, err := a.reloadStep(r.Context(), name)
		switch {
		case err != nil:
			a.internal(w, r, err)
		case s == nil:
			writeProblem(w, notFound("no step %q", name))
		default:
			writeJSON(w, http.StatusOK, s)
		}
		return
	}
	def, err := a.st.StepDefGet(r.Context(), &store.StepDefGetParams{Name: name, Version: version})
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeProblem(w, notFound("step %q has no version %d", name, version))
	case err != nil:
		a.internal(w, r, err)
	default:
		writeJSON(w, http.StatusOK, wireStep(def))
	}
}

// queryVersion reads the ?version= of a step's or a flow's path: 0 when
// absent. On a bad one it answers 400 and returns false.
func queryVersion(w http.ResponseWriter, r *http.Request) (int, bool) {
	s := r.URL.Query().Get("version")
	if s == "" {
		return 0, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		writeProblem(w, invalid("version", "version %q is not a positive integer", s))
		return 0, false
	}
	return n, true
}

// deleteStep answers DELETE /v1/steps/{name}[?force=true].
func (a *api) deleteStep(w http.ResponseWriter, r *http.Request) {
	name, ok := stepName(w, r)
	if !ok {
		return
	}
	force := false
	if s := r.URL.Query().Get("force"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			writeProblem(w, invalid("force", "force %q is not true or false", s))
			return
		}
		force = b
	}
	if a.isGoStep(name) {
		writeProblem(w, conflict("name", "step %q is a Go step of this server; it cannot be deleted through the API", name))
		return
	}
	err := a.st.StepDefDelete(r.Context(), &store.StepDefDeleteParams{
		Name: name, Workflows: []string{oneStepWorkflow(name)}, Force: force,
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		a.forgetStep(name)
		writeProblem(w, notFound("no step %q", name))
		return
	case errors.Is(err, store.ErrStepInUse):
		writeProblem(w, &Problem{Type: ProblemStepInUse, Title: "Conflict", Status: http.StatusConflict,
			Detail: fmt.Sprintf("%v; delete it when no run needs it, or with ?force=true (its runs then wait until it is registered again)", err)})
		return
	case err != nil:
		a.internal(w, r, err)
		return
	}
	a.forgetStep(name)
	w.WriteHeader(http.StatusNoContent)
}

// checkPullSteps checks that every name of a claim is a pull step,
// reading from the store a step this server does not know, or knows as
// another kind (it may have been deleted and registered again elsewhere).
func (a *api) checkPullSteps(ctx context.Context, names []string) (*Problem, error) {
	for i, name := range names {
		ok, err := a.isFlowPullStep(ctx, name)
		var fe *flowError
		switch {
		case errors.As(err, &fe):
			return invalid(fmt.Sprintf("steps.%d", i), "step %q is of flow %s, whose version %d %s", name, fe.name, fe.version, fe.reason()), nil
		case err != nil:
			return nil, err
		}
		if ok {
			continue
		}
		s, err := a.step(ctx, name)
		if err == nil && s != nil && s.Kind != KindPull && s.Kind != KindGo {
			s, err = a.reloadStep(ctx, name)
		}
		switch {
		case err != nil:
			return nil, err
		case s == nil:
			return invalid(fmt.Sprintf("steps.%d", i), "step %q is not registered; register it with POST /v1/steps", name), nil
		case s.Kind != KindPull:
			return invalid(fmt.Sprintf("steps.%d", i), "step %q is a %s step, not a pull step", name, s.Kind), nil
		}
	}
	return nil, nil
}
