package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"reprise/store"
)

// A timer is a durable timer of a run's execution, pending until it fires
// or its run drops it.
type timer struct {
	id     int64
	at     position
	fireAt time.Time
}

// TimerFire fires up to p.Limit (zero: 100) due timers (fire_at <= now),
// earliest first: it appends TimerFired for each and deletes it, and
// returns one Outcome per run, in the order of their first timer.
func (s *Store) TimerFire(ctx context.Context, p *store.TimerFireParams) ([]*store.Outcome, error) {
	now, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("fire timers: %w", err)
	}
	defer s.mu.Unlock()
	var due []*timer
	for _, tm := range s.timers {
		if !tm.fireAt.After(now) {
			due = append(due, tm)
		}
	}
	slices.SortFunc(due, func(a, b *timer) int { return cmp.Or(a.fireAt.Compare(b.fireAt), cmp.Compare(a.id, b.id)) })
	due = due[:min(len(due), limitOr100(p.Limit))]

	var outcomes []*store.Outcome
	byRun := make(map[string]*store.Outcome)
	for _, tm := range due {
		delete(s.timers, tm.id)
		r := s.runs[tm.at.runID]
		out := byRun[r.ID]
		if out == nil {
			out = &store.Outcome{RunID: r.ID, Owner: r.owner}
			byRun[r.ID] = out
			outcomes = append(outcomes, out)
		}
		fired := store.TimerFired(tm.at.execution, tm.at.position)
		out.Events = append(out.Events, r.appendEvents(now, fired)...)
	}
	return outcomes, nil
}

// NextWake returns the earliest ready time of a task nobody holds, of the
// given steps (nil: any step), the earliest lease expiry of any task, and
// the earliest timer; zero for none, and times past as they are.
func (s *Store) NextWake(ctx context.Context, p *store.NextWakeParams) (store.Wake, error) {
	if _, err := s.begin(ctx); err != nil {
		return store.Wake{}, fmt.Errorf("next wake: %w", err)
	}
	defer s.mu.Unlock()
	var w store.Wake
	for _, t := range s.tasks {
		switch {
		case !t.LeaseUntil.IsZero():
			w.Lease = earliest(w.Lease, t.LeaseUntil)
		case p.Steps == nil || slices.Contains(p.Steps, t.Step):
			w.Task = earliest(w.Task, t.readyAt)
		}
	}
	for _, tm := range s.timers {
		w.Timer = earliest(w.Timer, tm.fireAt)
	}
	return w, nil
}

// earliest returns the earlier of a and b, a zero time being none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}
