package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

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

// A Waiting is a step that a run waits for and that no engine or pull
// worker has claimed: its task has been ready for longer than
// Config.UnclaimedAfter.
type Waiting struct {
	Step     string `json:"step"`
	Position int    `json:"position"`
	// Since is when the step became ready: when it was scheduled or
	// redriven, or when its retry came due.
	Since time.Time `json:"since"`
	// Why is what the engine that looked can tell: WhyNotRegistered or
	// WhyNotClaimed.
	Why string `json:"why"`
}

// String says what the run waits for, as a log line or a test failure
// would.
func (w *Waiting) String() string {
	return fmt.Sprintf("step %s (position %d) ready since %s: %s",
		w.Step, w.Position, w.Since.Format(time.RFC3339Nano), w.Why)
}
