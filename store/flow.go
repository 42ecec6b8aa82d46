package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"time"
)

// A FlowDefinition is one version of a declarative flow kept in the
// store (package flow parses it; the store only keeps it).
type FlowDefinition struct {
	Name string
	// Version numbers the flow's definitions from 1; each FlowPut whose
	// flow differs from the latest version's adds one.
	Version int
	// Flow is the flow's canonical JSON (flow.Flow.Canonical), as given.
	Flow      json.RawMessage
	CreatedAt time.Time
}

// FlowStore keeps declarative flows, versioned; it is part of Store.
type FlowStore interface {
	// FlowPut records a flow: version n+1 of a name whose latest version
	// is n (1 for a new name). A flow byte for byte the same as the latest
	// version's is not recorded again: that version is returned with
	// created=false. (A flow the same as an older version's is a new
	// version: the latest is what a run by name starts.)
	FlowPut(ctx context.Context, p *FlowPutParams) (def *FlowDefinition, created bool, err error)
	// FlowGet returns a flow's latest version (Version 0) or the given
	// one, or ErrNotFound.
	FlowGet(ctx context.Context, p *FlowGetParams) (*FlowDefinition, error)
	// FlowList returns the latest version of every flow, by name.
	FlowList(ctx context.Context, p *FlowListParams) ([]*FlowDefinition, error)
}

// FlowPutParams records a flow.
type FlowPutParams struct {
	Name string
	// Flow is the flow's canonical JSON; the caller validated it.
	Flow json.RawMessage
}

// FlowGetParams selects a flow's version.
type FlowGetParams struct {
	Name string
	// Version selects a version; zero selects the latest.
	Version int
}

// FlowListParams lists flows. It has no fields yet.
type FlowListParams struct{}

// Next decides what FlowPut records, given latest, the flow's greatest
// version (nil for none): the version to write or, when latest holds the
// same flow, same (latest is returned). Stores call it, so that the rule
// lives once.
func (p *FlowPutParams) Next(latest *FlowDefinition) (version int, same bool, err error) {
	switch {
	case p.Name == "":
		return 0, false, errors.New("flow name is empty")
	case len(p.Flow) == 0 || !json.Valid(p.Flow):
		return 0, false, errors.New("flow is not JSON")
	case latest == nil:
		return 1, false, nil
	case bytes.Equal(latest.Flow, p.Flow):
		return latest.Version, true, nil
	}
	return latest.Version + 1, false, nil
}

// Check checks the params of FlowGet.
func (p *FlowGetParams) Check() error {
	switch {
	case p.Name == "":
		return errors.New("flow name is empty")
	case p.Version < 0:
		return errors.New("flow version is negative")
	}
	return nil
}
