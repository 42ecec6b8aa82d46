package reprise

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"reprise/retry"
	"reprise/store"
)

// Step definitions are steps defined as data instead of code: a name, a
// kind that says who runs the step's attempts (an HTTP endpoint, or pull
// workers), a URL and a policy. They live in the store, so that every
// engine on it runs a step the same way and a restart loses none of them.
// Each registration is a new version, and a step scheduled under version n
// keeps n's URL and policy for all its attempts: the version is recorded
// with the scheduled step (StepSpec.StepVersion, Task.StepVersion,
// StepInfo.StepVersion) and in its StepScheduled event.

// storedStep marks a step entry made from a stored definition.
type storedStep struct {
	version int
	kind    string
}

// RegisterStepDefinition registers a step defined in the store
// (StepDefStore), as of version def. run runs each attempt in this engine;
// nil makes the step a remote one, whose attempts pull workers claim
// (ClaimTasks). The same run serves every version: the version an attempt
// belongs to is in its StepInfo.
//
// The engine schedules such a step under its current stored version:
// each time a workflow calls it, the engine reads the current version
// from the store (one read by key), takes its policy and records its
// number with the step, so that every engine on one store schedules it
// the same way whatever it registered. A step found deleted is
// unregistered. A registration older than the one the engine holds
// changes nothing. A Go step of the same name (Register) gives
// ErrStepDefinedInGo.
func (e *Engine) RegisterStepDefinition(def *store.StepDefinition, run func(context.Context, json.RawMessage) (json.RawMessage, error)) error {
	if def == nil || def.Name == "" {
		return errors.New("register step definition: name is empty")
	}
	cp, err := definitionPolicy(def)
	if err != nil {
		return fmt.Errorf("register step definition %s: %w", def.Name, err)
	}
	ent := &stepEntry{name: def.Name, cfg: stepConfig{policy: cp}, stored: &storedStep{version: def.Version, kind: def.Kind}}
	if run != nil {
		ent.run = func(ctx context.Context, in json.RawMessage, _ *inputMemo) (json.RawMessage, error) {
			return run(ctx, in)
		}
	}
	e.mu.Lock()
	old := e.stepLocked(def.Name)
	switch {
	case old != nil && old.stored == nil:
		e.mu.Unlock()
		return fmt.Errorf("register step definition %s: %w", def.Name, store.ErrStepDefinedInGo)
	case old != nil && old.stored.version > def.Version:
		e.mu.Unlock()
		return nil
	}
	e.putStepLocked(ent)
	e.mu.Unlock()
	e.kick()
	return nil
}

// UnregisterStepDefinition forgets a step registered with
// RegisterStepDefinition: this engine stops scheduling it under a version
// and running its attempts. A Go step of the name stays.
func (e *Engine) UnregisterStepDefinition(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.dropStoredLocked(name, nil)
}

// StepDefinitionVersion returns the version of the stored definition of
// a step this engine holds (RegisterStepDefinition, or a later version it
// read as it scheduled the step); 0 for none, or once the engine found the
// step deleted.
func (e *Engine) StepDefinitionVersion(name string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s := e.stepLocked(name); s != nil && s.stored != nil {
		return s.stored.version
	}
	return 0
}

// HasGoStep reports whether a step of that name is registered in Go
// (Register) on this engine.
func (e *Engine) HasGoStep(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.steps[name]
	return s != nil && s.stored == nil
}

// stepLocked returns the step of the name, local or remote, or nil.
func (e *Engine) stepLocked(name string) *stepEntry {
	if s := e.steps[name]; s != nil {
		return s
	}
	return e.remote[name]
}

// putStepLocked makes ent the step of its name: a local step when it has
// a function, a remote one otherwise.
func (e *Engine) putStepLocked(ent *stepEntry) {
	if ent.run != nil {
		e.steps[ent.name] = ent
		delete(e.remote, ent.name)
	} else {
		e.remote[ent.name] = ent
		delete(e.steps, ent.name)
	}
}

// dropStoredLocked removes the stored step of the name: only was, when it
// is not nil.
func (e *Engine) dropStoredLocked(name string, only *stepEntry) {
	for _, m := range []map[string]*stepEntry{e.steps, e.remote} {
		if s := m[name]; s != nil && s.stored != nil && (only == nil || s == only) {
			delete(m, name)
		}
	}
}

// stepDefaults returns the policy and the definition version of a step
// scheduled now: the call's policy (nil for none) or else the step's
// default, and for a stored step its current version, read from the
// store (see RegisterStepDefinition); 0 for other steps.
func (e *Engine) stepDefaults(ctx context.Context, name string, call *compiledPolicy) (*compiledPolicy, int) {
	e.mu.Lock()
	s := e.stepLocked(name)
	e.mu.Unlock()
	if s == nil || s.stored == nil {
		if call != nil {
			return call, 0
		}
		return e.policyFor(name), 0
	}
	s = e.currentDefinition(ctx, s)
	version := 0
	if s != nil {
		version = s.stored.version
	}
	switch {
	case call != nil:
		return call, version
	case s != nil && s.cfg.policy != nil:
		return s.cfg.policy, version
	}
	return e.policyFor(name), version
}

// currentDefinition reads the current version of stored step s and
// returns the entry for it: s when s is current, a new entry (registered
// in s's place) for a later version of the same kind, and nil for a step
// deleted. A later version of another kind (the step was deleted and
// defined again) unregisters s, as this engine was not told how to run
// that kind, and is returned unregistered, to be scheduled under. If the
// store cannot be read, s stands.
func (e *Engine) currentDefinition(ctx context.Context, s *stepEntry) *stepEntry {
	def, err := e.store.StepDefGet(ctx, &store.StepDefGetParams{Name: s.name})
	switch {
	case errors.Is(err, ErrNotFound):
		e.mu.Lock()
		e.dropStoredLocked(s.name, s)
		e.mu.Unlock()
		return nil
	case err != nil:
		if ctx.Err() == nil { // else the replayer is stopping, and writes nothing
			e.log.Warn("read step definition; scheduling under the version registered", "step", s.name,
				"version", s.stored.version, "err", err)
		}
		return s
	case def.Version == s.stored.version:
		return s
	}
	cp, err := definitionPolicy(def)
	if err != nil {
		e.log.Warn("step definition's policy; scheduling under the version registered", "step", s.name,
			"version", def.Version, "err", err)
		return s
	}
	next := &stepEntry{name: s.name, cfg: s.cfg, run: s.run, stored: &storedStep{version: def.Version, kind: def.Kind}}
	next.cfg.policy = cp
	e.mu.Lock()
	defer e.mu.Unlock()
	cur := e.stepLocked(s.name)
	if cur != nil && cur != s && cur.stored != nil && cur.stored.version >= def.Version {
		return cur // registered meanwhile
	}
	if def.Kind != s.stored.kind {
		e.dropStoredLocked(s.name, s)
		return next
	}
	if cur == s {
		e.putStepLocked(next)
	}
	return next
}

// definitionPolicy compiles a definition's policy; nil for none.
func definitionPolicy(def *store.StepDefinition) (*compiledPolicy, error) {
	if def.Policy == "" {
		return nil, nil
	}
	p, err := retry.ParseAny(def.Policy)
	if err != nil {
		return nil, fmt.Errorf("policy of version %d: %w", def.Version, err)
	}
	return compilePolicy(p)
}
