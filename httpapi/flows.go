package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"reprise"
	"reprise/flow"
	"reprise/internal/redact"
	"reprise/store"
)

// Flows pushed through the API are kept in the engine's store
// (store.FlowStore), versioned, as steps are: every server on one
// database runs the same ones, and a restart loses none. A server
// registers a flow's workflow and steps on its engine (flow.Set):
//
//   - every stored flow's latest version when the handler is made, and
//     again whenever SyncFlows runs (reprise server runs it every few
//     seconds), so that a server takes over the runs of a flow pushed to
//     another one;
//   - a flow pushed to it, at once;
//   - a flow that a request names and that it does not know at its latest
//     version (a run started by the flow's name, GET /v1/flows/{name}, a
//     claim of a flow's pull step), read from the store then.
//
// A run carries its flow (flow.RunInput), so the version a run started
// with is the one it runs to its end, on any server.
//
// A stored version may not parse: written by a newer reprise, checked by
// a rule that got stricter since, or changed in the database. It is
// listed and shown with its error, and no run starts from it; a version
// pushed after it replaces it.

// Flow is a stored flow as the API shows it.
type Flow struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
	// Steps and Goals name the flow's steps and its goals, in order.
	Steps     []string  `json:"steps"`
	Goals     []string  `json:"goals"`
	CreatedAt time.Time `json:"created_at"`
	// Flow is the flow itself in canonical JSON, the credentials of its
	// URLs (userinfo, secret query values) shown as "xxxxx": GET
	// /v1/flows/{name} has it, the other answers do not.
	Flow json.RawMessage `json:"flow,omitempty"`
	// Error, when set, says why this stored version does not parse; its
	// Steps and Goals are then empty, and it has no Flow.
	Error string `json:"error,omitempty"`
}

// wireFlow is version def of f as the API shows it.
func wireFlow(f *flow.Flow, def *store.FlowDefinition, withFlow bool) *Flow {
	out := &Flow{Name: def.Name, Version: def.Version, Steps: make([]string, 0, len(f.Steps)), Goals: f.Goals,
		CreatedAt: def.CreatedAt}
	for _, s := range f.Steps {
		out.Steps = append(out.Steps, s.Name)
	}
	if withFlow {
		out.Flow = f.Shown(redact.String) // secrets in URLs shown as xxxxx, as GET /v1/steps does
	}
	return out
}

// wireBrokenFlow is version def, which does not parse, as the API shows it.
func wireBrokenFlow(def *store.FlowDefinition, err *flowError) *Flow {
	return &Flow{Name: def.Name, Version: def.Version, Steps: []string{}, Goals: []string{}, CreatedAt: def.CreatedAt,
		Error: err.reason()}
}

// A flowError is a stored version of a flow that does not parse.
type flowError struct {
	name    string
	version int
	list    flow.ErrorList
}

func (e *flowError) Error() string {
	return fmt.Sprintf("stored flow %s version %d %s", e.name, e.version, e.reason())
}

func (e *flowError) Unwrap() error { return e.list }

// reason says that the version does not parse, with its first fault and
// how many more, in one line, the secrets of URLs it quotes shown as
// xxxxx.
func (e *flowError) reason() string {
	msg := "does not parse: " + e.list[0].Msg
	if n := len(e.list) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more)", n)
	}
	return redact.String(msg)
}

// flowList is the answer of GET /v1/flows.
type flowList struct {
	Flows []*Flow `json:"flows"`
}

// SyncFlows registers on the engine of flows the latest version of every
// flow stored in st that flows does not have at that version yet. A
// stored flow that no longer parses (written by a newer reprise, say) is
// left out, and named in the error, after the others are registered.
func SyncFlows(ctx context.Context, st store.Store, flows *flow.Set) error {
	defs, err := st.FlowList(ctx, &store.FlowListParams{})
	if err != nil {
		return fmt.Errorf("sync flows: %w", err)
	}
	var errs []error
	for _, def := range defs {
		if _, err := adoptFlow(flows, def); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// adoptFlow registers stored version def on flows, unless flows has it or
// a later one, and returns it parsed: a *flowError when it does not parse.
func adoptFlow(flows *flow.Set, def *store.FlowDefinition) (*flow.Flow, error) {
	if f, v := flows.Latest(def.Name); f != nil && v == def.Version {
		return f, nil
	}
	f, err := parseStored(def)
	if err != nil {
		return nil, err
	}
	if err := flows.Add(f, def.Version); err != nil {
		return nil, err
	}
	return f, nil
}

// parseStored parses stored version def: a *flowError when it does not.
func parseStored(def *store.FlowDefinition) (*flow.Flow, error) {
	f, err := flow.Parse(fmt.Sprintf("flow %s version %d", def.Name, def.Version), def.Flow)
	var list flow.ErrorList
	switch {
	case errors.As(err, &list):
		return nil, &flowError{name: def.Name, version: def.Version, list: list}
	case err != nil:
		return nil, fmt.Errorf("stored flow %s version %d: %w", def.Name, def.Version, err)
	}
	return f, nil
}

// flow returns the latest stored version of the flow of the name,
// registered on the engine, or nil when there is none.
func (a *api) flow(ctx context.Context, name string) (*flow.Flow, *store.FlowDefinition, error) {
	def, err := a.st.FlowGet(ctx, &store.FlowGetParams{Name: name})
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	f, err := adoptFlow(a.flows, def)
	return f, def, err
}

// isFlowPullStep reports whether step is a pull step of a flow
// (FLOW.STEP), reading from the store a flow this server does not know.
func (a *api) isFlowPullStep(ctx context.Context, step string) (bool, error) {
	if a.flows.IsPullStep(step) {
		return true, nil
	}
	for _, name := range flow.FlowsOfStep(step) {
		if f, _ := a.flows.Latest(name); f != nil || flow.CheckName(name) != nil {
			continue
		}
		if _, _, err := a.flow(ctx, name); err != nil {
			return false, err
		}
	}
	return a.flows.IsPullStep(step), nil
}

// pushFlow answers POST /v1/flows: a flow file, YAML or JSON, checked
// whole, kept as a new version unless the latest holds the same flow.
func (a *api) pushFlow(w http.ResponseWriter, r *http.Request) {
	if p := flowMediaType(r.Header.Get("Content-Type")); p != nil {
		writeProblem(w, p)
		return
	}
	body, p := readBody(w, r, a.opts.MaxBodyBytes)
	if p != nil {
		writeProblem(w, p)
		return
	}
	f, err := flow.Parse("body", body)
	var list flow.ErrorList
	if errors.As(err, &list) {
		writeProblem(w, flowProblem(list))
		return
	}
	if err != nil { // Parse reports its faults as an ErrorList
		writeProblem(w, invalid("body", "%v", err))
		return
	}
	if p := checkJSON(f.Canonical()); p != nil {
		p.Field = "body"
		writeProblem(w, p)
		return
	}
	var bad flow.ErrorList
	for _, s := range f.Steps {
		if s.Kind != flow.KindHTTP {
			continue
		}
		if err := a.caller.CheckTarget(r.Context(), s.URL); err != nil {
			bad = append(bad, &flow.Error{File: "body", Pos: s.Pos(), Msg: fmt.Sprintf("step %s: %v", s.Name, err)})
		}
	}
	if len(bad) > 0 {
		writeProblem(w, flowProblem(bad))
		return
	}
	def, created, err := a.st.FlowPut(r.Context(), &store.FlowPutParams{Name: f.Name, Flow: f.Canonical()})
	if err != nil {
		a.internal(w, r, err)
		return
	}
	if err := a.flows.Add(f, def.Version); err != nil {
		a.internal(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	w.Header().Set("Location", "/v1/flows/"+url.PathEscape(f.Name)+"?version="+strconv.Itoa(def.Version))
	writeJSON(w, status, wireFlow(f, def, false))
}

// flowMediaType accepts a body of JSON or YAML.
func flowMediaType(ct string) *Problem {
	return checkMediaType(ct, "send a flow as application/yaml or application/json",
		"application/json", "application/yaml", "application/x-yaml", "text/yaml")
}

// flowProblem is the 400 of a flow file with faults, each with its place.
func flowProblem(list flow.ErrorList) *Problem {
	p := invalid("body", "the flow has %d error(s):\n%v", len(list), list)
	for _, e := range list {
		p.Errors = append(p.Errors, FlowError{Line: e.Pos.Line, Column: e.Pos.Col, Message: e.Msg})
	}
	return p
}

// listFlows answers GET /v1/flows: the latest version of every flow,
// each registered on this server's engine.
func (a *api) listFlows(w http.ResponseWriter, r *http.Request) {
	defs, err := a.st.FlowList(r.Context(), &store.FlowListParams{})
	if err != nil {
		a.internal(w, r, err)
		return
	}
	out := flowList{Flows: make([]*Flow, 0, len(defs))}
	for _, def := range defs {
		f, err := adoptFlow(a.flows, def)
		var fe *flowError
		switch {
		case errors.As(err, &fe):
			out.Flows = append(out.Flows, wireBrokenFlow(def, fe))
		case err != nil:
			a.internal(w, r, err)
			return
		default:
			out.Flows = append(out.Flows, wireFlow(f, def, false))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// getFlow answers GET /v1/flows/{name}[?version=N].
func (a *api) getFlow(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := flow.CheckName(name); err != nil {
		writeProblem(w, invalid("name", "%v", err))
		return
	}
	version, ok := queryVersion(w, r)
	if !ok {
		return
	}
	def, err := a.st.FlowGet(r.Context(), &store.FlowGetParams{Name: name, Version: version})
	switch {
	case errors.Is(err, store.ErrNotFound) && version == 0:
		writeProblem(w, notFound("no flow %q; push it with POST /v1/flows", name))
		return
	case errors.Is(err, store.ErrNotFound):
		writeProblem(w, notFound("flow %q has no version %d", name, version))
		return
	case err != nil:
		a.internal(w, r, err)
		return
	}
	var f *flow.Flow
	if version == 0 {
		f, err = adoptFlow(a.flows, def)
	} else {
		f, err = parseStored(def)
	}
	var fe *flowError
	switch {
	case errors.As(err, &fe):
		writeJSON(w, http.StatusOK, wireBrokenFlow(def, fe))
	case err != nil:
		a.internal(w, r, err)
	default:
		writeJSON(w, http.StatusOK, wireFlow(f, def, true))
	}
}

// startFlowRun starts a run of the latest version of a flow, its input
// checked against the flow's input_schema first.
func (a *api) startFlowRun(ctx context.Context, name string, input json.RawMessage, opts []reprise.RunOption) (*reprise.Run, bool, *Problem, error) {
	if err := flow.CheckName(name); err != nil {
		return nil, false, invalid("flow", "%v", err), nil
	}
	f, _, err := a.flow(ctx, name)
	var fe *flowError
	switch {
	case errors.As(err, &fe):
		return nil, false, invalid("flow", "flow %q cannot run: its latest version, %d, %s; push one that parses", name, fe.version, fe.reason()), nil
	case err != nil:
		return nil, false, nil, err
	case f == nil:
		return nil, false, notFound("no flow %q; push it with POST /v1/flows", name), nil
	}
	if err := f.CheckInput(input); err != nil {
		return nil, false, invalid("input", "flow %s: %v", name, err), nil
	}
	run, created, err := flow.Start(ctx, a.e, f, input, opts...)
	return run, created, nil, err
}
