package memory

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"reprise/store"
)

// cloneFlow is a copy of a flow definition that shares nothing with it.
func cloneFlow(d *store.FlowDefinition) *store.FlowDefinition {
	c := *d
	c.Flow = cloneJSON(d.Flow)
	return &c
}

// latestFlow returns the greatest version of a flow, or nil.
func (s *Store) latestFlow(name string) *store.FlowDefinition {
	versions := s.flows[name]
	if len(versions) == 0 {
		return nil
	}
	return versions[len(versions)-1]
}

// FlowPut records version n+1 of a flow, or returns the latest version,
// created=false, if it holds the same flow (FlowPutParams.Next decides).
func (s *Store) FlowPut(ctx context.Context, p *store.FlowPutParams) (*store.FlowDefinition, bool, error) {
	now, err := s.begin(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("put flow %s: %w", p.Name, err)
	}
	defer s.mu.Unlock()
	latest := s.latestFlow(p.Name)
	version, same, err := p.Next(latest)
	switch {
	case err != nil:
		return nil, false, fmt.Errorf("put flow %s: %w", p.Name, err)
	case same:
		return cloneFlow(latest), false, nil
	}
	def := &store.FlowDefinition{Name: p.Name, Version: version, Flow: cloneJSON(p.Flow), CreatedAt: now}
	s.flows[p.Name] = append(s.flows[p.Name], def)
	return cloneFlow(def), true, nil
}

// FlowGet returns a flow's latest version (Version 0) or the one asked
// for.
func (s *Store) FlowGet(ctx context.Context, p *store.FlowGetParams) (*store.FlowDefinition, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("get flow %s version %d: %w", p.Name, p.Version, err)
	}
	if _, err := s.begin(ctx); err != nil {
		return nil, fmt.Errorf("get flow %s version %d: %w", p.Name, p.Version, err)
	}
	defer s.mu.Unlock()
	def := s.latestFlow(p.Name)
	if p.Version != 0 {
		def = nil
		if i := slices.IndexFunc(s.flows[p.Name], func(d *store.FlowDefinition) bool { return d.Version == p.Version }); i >= 0 {
			def = s.flows[p.Name][i]
		}
	}
	if def == nil {
		return nil, fmt.Errorf("get flow %s version %d: %w", p.Name, p.Version, store.ErrNotFound)
	}
	return cloneFlow(def), nil
}

// FlowList returns the latest version of each flow, by name.
func (s *Store) FlowList(ctx context.Context, _ *store.FlowListParams) ([]*store.FlowDefinition, error) {
	if _, err := s.begin(ctx); err != nil {
		return nil, fmt.Errorf("list flows: %w", err)
	}
	defer s.mu.Unlock()
	defs := make([]*store.FlowDefinition, 0, len(s.flows))
	for name := range s.flows {
		defs = append(defs, cloneFlow(s.latestFlow(name)))
	}
	slices.SortFunc(defs, func(a, b *store.FlowDefinition) int { return strings.Compare(a.Name, b.Name) })
	return defs, nil
}
