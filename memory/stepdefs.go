package memory

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"reprise/store"
)

// latestStepDef returns the greatest version of a step, deleted or not, or
// nil for a name never defined.
func (s *Store) latestStepDef(name string) *store.StepDefinition {
	versions := s.steps[name]
	if len(versions) == 0 {
		return nil
	}
	return versions[len(versions)-1]
}

// StepDefine records version n+1 of a step, or returns the current
// version, created=false, if it is the same definition
// (StepDefineParams.Next decides).
func (s *Store) StepDefine(ctx context.Context, p *store.StepDefineParams) (*store.StepDefinition, bool, error) {
	now, err := s.begin(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("define step %s: %w", p.Name, err)
	}
	defer s.mu.Unlock()
	latest := s.latestStepDef(p.Name)
	version, same, err := p.Next(latest)
	switch {
	case err != nil:
		return nil, false, fmt.Errorf("define step %s: %w", p.Name, err)
	case same:
		c := *latest
		return &c, false, nil
	}
	def := &store.StepDefinition{
		Name: p.Name, Version: version, Kind: p.Kind, URL: p.URL, Policy: p.Policy, CreatedAt: now,
	}
	s.steps[p.Name] = append(s.steps[p.Name], def)
	c := *def
	return &c, true, nil
}

// StepDefGet returns a step's current version (Version 0), or ErrNotFound
// when it has none or was deleted; or the version asked for, deleted or
// not.
func (s *Store) StepDefGet(ctx context.Context, p *store.StepDefGetParams) (*store.StepDefinition, error) {
	if _, err := s.begin(ctx); err != nil {
		return nil, fmt.Errorf("get step %s version %d: %w", p.Name, p.Version, err)
	}
	defer s.mu.Unlock()
	var def *store.StepDefinition
	if p.Version == 0 {
		if latest := s.latestStepDef(p.Name); latest != nil && latest.DeletedAt.IsZero() {
			def = latest
		}
	} else if i := slices.IndexFunc(s.steps[p.Name], func(d *store.StepDefinition) bool { return d.Version == p.Version }); i >= 0 {
		def = s.steps[p.Name][i]
	}
	if def == nil {
		return nil, fmt.Errorf("get step %s version %d: %w", p.Name, p.Version, store.ErrNotFound)
	}
	c := *def
	return &c, nil
}

// StepDefList returns the current version of each step not deleted, by
// name.
func (s *Store) StepDefList(ctx context.Context, _ *store.StepDefListParams) ([]*store.StepDefinition, error) {
	if _, err := s.begin(ctx); err != nil {
		return nil, fmt.Errorf("list steps: %w", err)
	}
	defer s.mu.Unlock()
	defs := []*store.StepDefinition{}
	for name := range s.steps {
		if latest := s.latestStepDef(name); latest.DeletedAt.IsZero() {
			c := *latest
			defs = append(defs, &c)
		}
	}
	slices.SortFunc(defs, func(a, b *store.StepDefinition) int { return strings.Compare(a.Name, b.Name) })
	return defs, nil
}

// StepDefDelete deletes a step unless, without p.Force, a task of it
// exists or an active run of one of p.Workflows does (ErrStepInUse). Every
// version not deleted yet, superseded ones too, takes the time of the
// deletion as its DeletedAt, as in both stores.
func (s *Store) StepDefDelete(ctx context.Context, p *store.StepDefDeleteParams) error {
	now, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("delete step %s: %w", p.Name, err)
	}
	defer s.mu.Unlock()
	if latest := s.latestStepDef(p.Name); latest == nil || !latest.DeletedAt.IsZero() {
		return fmt.Errorf("delete step %s: %w", p.Name, store.ErrNotFound)
	}
	if !p.Force {
		if err := s.stepInUse(p); err != nil {
			return fmt.Errorf("delete step %s: %w", p.Name, err)
		}
	}
	for _, d := range s.steps[p.Name] {
		if d.DeletedAt.IsZero() {
			d.DeletedAt = now
		}
	}
	return nil
}

// stepInUse gives ErrStepInUse, saying why, while a task of the step
// exists (scheduled, waiting to retry or running) or an active run of one
// of p.Workflows does.
func (s *Store) stepInUse(p *store.StepDefDeleteParams) error {
	var tasks []string
	for _, t := range s.tasks {
		if t.Step == p.Name {
			tasks = append(tasks, t.RunID)
		}
	}
	if len(tasks) > 0 {
		return fmt.Errorf("%w: run %s has a task of it", store.ErrStepInUse, slices.Min(tasks))
	}
	var runs []*run
	for _, r := range s.runs {
		if !r.Status.Final() && slices.Contains(p.Workflows, r.Workflow) {
			runs = append(runs, r)
		}
	}
	if len(runs) > 0 {
		r := slices.MinFunc(runs, byCreated)
		return fmt.Errorf("%w: run %s of workflow %s is active", store.ErrStepInUse, r.ID, r.Workflow)
	}
	return nil
}
