package reprise

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"reprise/retry"
)

// Step definitions are steps defined as data instead of code: a name, a
// kind that says who runs the step's attempts (an HTTP endpoint, or pull
// workers), a URL and a policy. They live in the store, so that every
// engine on it runs a step the same way and a restart loses none of them.
// Each registration is a new version, and a step scheduled under version n
// keeps n's URL and policy for all its attempts: the version is recorded
// with the scheduled step (StepSpec.StepVersion, Task.StepVersion,
// StepInfo.StepVersion) and in its StepScheduled event.

// Errors of step definitions. Match them with errors.Is.
var (
	// ErrStepInUse: the step cannot be deleted while runs still need it.
	ErrStepInUse = errors.New("step is in use")
	// ErrStepKindChanged: a definition of another kind than the step's
	// current one. A step's kind is fixed until it is deleted.
	ErrStepKindChanged = errors.New("step kind cannot change")
	// ErrStepDefinedInGo: a Go step of that name is registered on the
	// engine (Register); a stored definition cannot replace it.
	ErrStepDefinedInGo = errors.New("a Go step of that name is registered")
)

// A StepDefinition is one version of a step defined in the store.
type StepDefinition struct {
	Name string
	// Version numbers the step's definitions from 1; each StepDefine that
	// changes something adds one, and numbers are never reused, not even
	// after StepDefDelete.
	Version int
	// Kind says who runs the attempts, in the words of whoever defines
	// the step (the HTTP API: "http" or "pull"). The store keeps it as it
	// is given.
	Kind string
	// URL is where an HTTP step's attempts go; empty for other kinds.
	URL string
	// Policy is the step's policy in canonical text form; empty for the
	// engine's default.
	Policy    string
	CreatedAt time.Time
	// DeletedAt is when StepDefDelete deleted the step; zero while the
	// definition is current or superseded by a later version.
	DeletedAt time.Time
}

// StepDefStore keeps step definitions; it is part of Store.
type StepDefStore interface {
	// StepDefine records a definition of a step: version n+1 of a step
	// whose latest version is n (1 for a new name, or after a deletion the
	// number after the last deleted version). A definition identical to
	// the current version (same kind, URL and policy) is not recorded
	// again: that version is returned with created=false. A kind other
	// than the current version's gives ErrStepKindChanged.
	StepDefine(ctx context.Context, p *StepDefineParams) (def *StepDefinition, created bool, err error)
	// StepDefGet returns a step's current version (Version 0), or ErrNotFound
	// when the step has none or was deleted; or the given version, deleted
	// or not, or ErrNotFound if it never existed.
	StepDefGet(ctx context.Context, p *StepDefGetParams) (*StepDefinition, error)
	// StepDefList returns the current version of every step not deleted,
	// by name.
	StepDefList(ctx context.Context, p *StepDefListParams) ([]*StepDefinition, error)
	// StepDefDelete deletes a step: it has no current version from then
	// on, and its versions stay readable by number. It gives ErrNotFound
	// for a step with no current version and, unless Force, ErrStepInUse
	// while a task of the step exists (scheduled, waiting to retry or
	// running) or an active run of one of Workflows does.
	StepDefDelete(ctx context.Context, p *StepDefDeleteParams) error
}

// StepDefineParams defines a step.
type StepDefineParams struct {
	Name   string
	Kind   string
	URL    string
	Policy string
}

// StepDefGetParams selects a step definition.
type StepDefGetParams struct {
	Name string
	// Version selects a version; zero selects the current one.
	Version int
}

// StepDefListParams lists step definitions. It has no fields yet.
type StepDefListParams struct{}

// StepDefDeleteParams deletes a step definition.
type StepDefDeleteParams struct {
	Name string
	// Workflows are workflows that run the step (such as the HTTP API's
	// one-step workflow of it): an active run of one also keeps the step
	// in use, even before it has scheduled the step.
	Workflows []string
	// Force deletes the step even while it is in use. Its tasks then wait
	// until the step is defined again.
	Force bool
}

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
func (e *Engine) RegisterStepDefinition(def *StepDefinition, run func(context.Context, json.RawMessage) (json.RawMessage, error)) error {
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
		return fmt.Errorf("register step definition %s: %w", def.Name, ErrStepDefinedInGo)
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
	def, err := e.store.StepDefGet(ctx, &StepDefGetParams{Name: s.name})
	switch {
	case errors.Is(err, ErrNotFound):
		e.mu.Lock()
		e.dropStoredLocked(s.name, s)
		e.mu.Unlock()
		return nil
	case err != nil:
		if ctx.Err() == nil { // else the runner is stopping, and writes nothing
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
func definitionPolicy(def *StepDefinition) (*compiledPolicy, error) {
	if def.Policy == "" {
		return nil, nil
	}
	p, err := retry.ParseAny(def.Policy)
	if err != nil {
		return nil, fmt.Errorf("policy of version %d: %w", def.Version, err)
	}
	return compilePolicy(p)
}

// Next decides what StepDefine records, given latest, the step's greatest
// version, deleted or not (nil for none): the version to write, or, when
// the current version is the same definition, same (latest is returned).
// A kind other than the current version's gives ErrStepKindChanged. Stores
// call it, so that the rule lives once.
func (p *StepDefineParams) Next(latest *StepDefinition) (version int, same bool, err error) {
	switch {
	case p.Name == "":
		return 0, false, errors.New("step name is empty")
	case p.Kind == "":
		return 0, false, errors.New("step kind is empty")
	case latest == nil:
		return 1, false, nil
	case !latest.DeletedAt.IsZero():
		return latest.Version + 1, false, nil
	case latest.Kind != p.Kind:
		return 0, false, fmt.Errorf("%w: %s is a %s step, not %s", ErrStepKindChanged, p.Name, latest.Kind, p.Kind)
	case latest.URL == p.URL && latest.Policy == p.Policy:
		return latest.Version, true, nil
	}
	return latest.Version + 1, false, nil
}
