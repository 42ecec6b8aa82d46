package memory

import (
	"context"
	"fmt"
	"slices"

	"reprise/store"
)

// EngineStart records that an engine runs under p.ID on this store;
// ErrEngineLive if one does already, on this store or another that Open
// returned. An id whose store was closed (its engine is gone) is taken
// over.
func (s *Store) EngineStart(ctx context.Context, p *store.EngineStartParams) error {
	if _, err := s.begin(ctx); err != nil {
		return fmt.Errorf("start engine %s: %w", p.ID, err)
	}
	defer s.mu.Unlock()
	if s.engines[p.ID] != nil {
		return fmt.Errorf("start engine %s: %w", p.ID, store.ErrEngineLive)
	}
	s.engines[p.ID] = s
	return nil
}

// EngineStop forgets an engine, whichever store started it.
func (s *Store) EngineStop(ctx context.Context, id string) error {
	if _, err := s.begin(ctx); err != nil {
		return fmt.Errorf("stop engine %s: %w", id, err)
	}
	defer s.mu.Unlock()
	delete(s.engines, id)
	return nil
}

// EngineGone lists, by id, the engines recorded whose store was closed
// without EngineStop: their process, as far as the memory knows, died.
func (s *Store) EngineGone(ctx context.Context) ([]string, error) {
	if _, err := s.begin(ctx); err != nil {
		return nil, fmt.Errorf("list gone engines: %w", err)
	}
	defer s.mu.Unlock()
	var gone []string
	for id, on := range s.engines {
		if on == nil {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	return gone, nil
}

// TaskRelease cuts the live leases of the tasks leased to p.Owner to
// lapse now, and returns how many it cut. Lapsed leases stay as they are.
func (s *Store) TaskRelease(ctx context.Context, p *store.TaskReleaseParams) (int, error) {
	now, err := s.begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("release tasks of %s: %w", p.Owner, err)
	}
	defer s.mu.Unlock()
	n := 0
	for _, t := range s.tasks {
		if t.Owner == p.Owner && t.LeaseUntil.After(now) {
			t.LeaseUntil = now
			n++
		}
	}
	return n, nil
}
