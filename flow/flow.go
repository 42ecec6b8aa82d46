// Package flow runs declarative flows: HTTP, pull-worker and registered
// steps wired in a YAML or JSON file, run as a built-in workflow of the
// engine (docs/flows.md).
package flow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"reprise/retry"
)

// The kinds of a flow step: who runs its attempts.
const (
	// KindHTTP: the engine POSTs each attempt to the step's URL
	// (docs/http-steps.md).
	KindHTTP = "http"
	// KindPull: pull workers claim the attempts (POST /v1/tasks/claim).
	KindPull = "pull"
	// KindStep: a step registered with the engine under another name: a
	// Go step, or one defined through the API.
	KindStep = "step"
)

// WorkflowPrefix starts the name of the workflow that runs a flow: flow
// "fulfil-order" runs as workflow "flow:fulfil-order".
const WorkflowPrefix = "flow:"

// A Flow is a parsed and validated flow file.
type Flow struct {
	// Name is the flow's name (the file's "flow").
	Name string
	// InputSchema is the JSON Schema the run's input must match, or nil.
	InputSchema json.RawMessage
	// Steps are the flow's steps, in the order of the file.
	Steps []*Step
	// Goals names the goal steps: the file's "goals", else every step
	// that is not optional and that no step needs but optional ones.
	Goals []string

	byName map[string]*Step
	// order is the steps in an order where every step comes after those
	// it needs, the file's order among steps that are free to go.
	order []*Step
	// critical holds the goals and every step a goal needs, transitively.
	critical map[string]bool
	schema   *inputSchema
	// canonical is the flow's canonical JSON (Canonical).
	canonical []byte
}

// A Step is one step of a flow.
type Step struct {
	Name string
	Kind string
	// URL is where an HTTP step's attempts go.
	URL string
	// Target is the registered step a KindStep step calls.
	Target string
	// Input is the step's input as the file writes it, in JSON, with its
	// {{ }} references; nil when the file gives none.
	Input json.RawMessage
	// Needs names the steps that must complete before this one starts.
	Needs []string
	// Foreach is the reference that gives the list of work items, or a
	// JSON list written in the file; nil for a step without items.
	Foreach json.RawMessage
	// Policy is the step's retry policy, from "policy" or "work_config";
	// nil for the engine's default for the step's name.
	Policy *retry.Policy
	// Parallelism caps the work items in flight; 0 for no cap.
	Parallelism int
	// Optional says the step's failure does not fail the flow.
	Optional bool

	pos     Pos
	input   *value // compiled Input
	foreach *value // compiled Foreach
	// after holds every step this one needs, transitively.
	after map[string]bool
}

// Workflow returns the name of the workflow that runs the flow's runs.
func (f *Flow) Workflow() string { return WorkflowPrefix + f.Name }

// Step returns the step of the name, or nil.
func (f *Flow) Step(name string) *Step { return f.byName[name] }

// EngineStep returns the name under which the engine schedules the
// attempts of step s: "FLOW.STEP" for HTTP and pull steps, the target's
// name for a registered step.
func (f *Flow) EngineStep(s *Step) string {
	if s.Kind == KindStep {
		return s.Target
	}
	return f.Name + "." + s.Name
}

// Canonical returns the flow as one JSON document in the file's shape,
// steps in their order, a policy in its canonical text form (a
// work_config becomes one). Parse reads it back to the same flow; a run
// carries it in its input, so that it runs the version it started with.
func (f *Flow) Canonical() json.RawMessage { return f.canonical }

// Shown returns the canonical form with each HTTP step's URL as show
// gives it: a flow as shown to someone who may not see the secrets its
// URLs hold (show: a redaction). It is not the flow: do not parse it to
// run it.
func (f *Flow) Shown(show func(url string) string) json.RawMessage { return f.canonicalJSON(show) }

// canonicalJSON writes the canonical form, each URL as url gives it.
func (f *Flow) canonicalJSON(url func(string) string) []byte {
	var b bytes.Buffer
	str := func(s string) { b.Write(quote(s)) }
	b.WriteString(`{"flow":`)
	str(f.Name)
	if f.InputSchema != nil {
		b.WriteString(`,"input_schema":`)
		b.Write(f.InputSchema)
	}
	b.WriteString(`,"steps":{`)
	for i, s := range f.Steps {
		if i > 0 {
			b.WriteByte(',')
		}
		str(s.Name)
		b.WriteByte(':')
		b.WriteByte('{')
		switch s.Kind {
		case KindHTTP:
			b.WriteString(`"http":`)
			str(url(s.URL))
		case KindPull:
			b.WriteString(`"pull":true`)
		case KindStep:
			b.WriteString(`"step":`)
			str(s.Target)
		}
		if len(s.Needs) > 0 {
			b.WriteString(`,"needs":[`)
			for j, n := range s.Needs {
				if j > 0 {
					b.WriteByte(',')
				}
				str(n)
			}
			b.WriteByte(']')
		}
		if s.Foreach != nil {
			b.WriteString(`,"foreach":`)
			b.Write(s.Foreach)
		}
		if s.Input != nil {
			b.WriteString(`,"input":`)
			b.Write(s.Input)
		}
		if s.Policy != nil {
			b.WriteString(`,"policy":`)
			str(s.Policy.String())
		}
		if s.Parallelism > 0 {
			b.WriteString(`,"parallelism":` + strconv.Itoa(s.Parallelism))
		}
		if s.Optional {
			b.WriteString(`,"optional":true`)
		}
		b.WriteByte('}')
	}
	b.WriteString(`},"goals":[`)
	for i, g := range f.Goals {
		if i > 0 {
			b.WriteByte(',')
		}
		str(g)
	}
	b.WriteString("]}")
	return b.Bytes()
}

// quote is s as a JSON string.
func quote(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		panic(fmt.Sprintf("quote %q: %v", s, err)) // a Go string always encodes
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// Pos returns the place of the step's name in its flow file.
func (s *Step) Pos() Pos { return s.pos }

// CheckName reports whether name can name a flow.
func CheckName(name string) error {
	if !flowNameRE.MatchString(name) {
		return fmt.Errorf("flow name %q: want 1 to 100 letters, digits, '_', '.' or '-', starting with a letter or digit", name)
	}
	return nil
}
