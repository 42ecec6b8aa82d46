package flow

import (
	"fmt"
	"sync"

	"reprise"
)

// A Set is the flows an engine runs, each a name with versions: Add
// registers on the engine what the runs of a version need, and the Set
// remembers the latest version of each name it was given. One workflow
// serves every version of a flow (a run carries its version), and a step
// name is registered once, however many versions have it.
type Set struct {
	e    *reprise.Engine
	opts *Options

	mu    sync.Mutex
	flows map[string]versioned
	// kinds are the engine steps registered, by name: KindHTTP or KindPull.
	kinds map[string]string
}

// versioned is a flow at a version.
type versioned struct {
	f       *Flow
	version int
}

// NewSet returns an empty set of the flows e runs.
func NewSet(e *reprise.Engine, opts *Options) *Set {
	return &Set{e: e, opts: opts, flows: make(map[string]versioned), kinds: make(map[string]string)}
}

// Add registers version of f: its workflow and its HTTP and pull steps
// that the engine does not have yet. A version older than the latest
// known stays registered but does not become the latest. A step name that
// changes kind from one version to the next is registered as the new
// version has it, for every run that schedules it from then on.
func (s *Set) Add(f *Flow, version int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var defs []reprise.Definition
	var pulls []string
	if _, known := s.flows[f.Name]; !known {
		defs = append(defs, reprise.NewWorkflow(f.Workflow(), execute))
	}
	for _, st := range f.Steps {
		name := f.EngineStep(st)
		if st.Kind == KindStep || s.kinds[name] == st.Kind {
			continue
		}
		switch st.Kind {
		case KindHTTP:
			caller, err := s.opts.caller()
			if err != nil {
				return err
			}
			defs = append(defs, reprise.NewRawStep(name, httpCall(caller)))
		case KindPull:
			pulls = append(pulls, name)
		}
	}
	if len(defs) > 0 {
		if err := s.e.Register(defs...); err != nil {
			return fmt.Errorf("register flow %s: %w", f.Name, err)
		}
	}
	for _, name := range pulls {
		if err := s.e.RegisterRemoteStep(name, nil); err != nil {
			return fmt.Errorf("register flow %s: step %s: %w", f.Name, name, err)
		}
	}
	for _, st := range f.Steps {
		if st.Kind != KindStep {
			s.kinds[f.EngineStep(st)] = st.Kind
		}
	}
	if cur, ok := s.flows[f.Name]; !ok || version > cur.version {
		s.flows[f.Name] = versioned{f, version}
	}
	return nil
}

// Latest returns the latest version of the flow of the name that the set
// was given, or nil and 0.
func (s *Set) Latest(name string) (*Flow, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.flows[name]
	return v.f, v.version
}

// IsPullStep reports whether step is the engine name (Flow.EngineStep) of
// a pull step of a flow the set was given.
func (s *Set) IsPullStep(step string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kinds[step] == KindPull
}

// FlowsOfStep returns the names of the flows whose steps the engine
// name step could be of: "a.b.c" is step "b.c" of flow "a" or step "c" of
// flow "a.b", since both names may hold dots.
func FlowsOfStep(step string) []string {
	var names []string
	for i := range len(step) {
		if step[i] == '.' && i > 0 && i < len(step)-1 {
			names = append(names, step[:i])
		}
	}
	return names
}
