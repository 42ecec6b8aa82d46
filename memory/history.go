package memory

import (
	"context"
	"fmt"
	"time"

	"reprise/store"
)

// HistoryList returns a run's events with Seq > p.AfterSeq, in order.
func (s *Store) HistoryList(ctx context.Context, p *store.HistoryListParams) ([]store.Event, error) {
	if _, err := s.begin(ctx); err != nil {
		return nil, fmt.Errorf("list history of run %s: %w", p.RunID, err)
	}
	defer s.mu.Unlock()
	r := s.runs[p.RunID]
	if r == nil {
		return nil, fmt.Errorf("list history of run %s: %w", p.RunID, store.ErrNotFound)
	}
	// Seq numbers the history from 1 without gaps: event i has Seq i+1.
	after := int(min(max(p.AfterSeq, 0), int64(len(r.history))))
	return cloneEvents(r.history[after:]), nil
}

// appendEvents appends events to the run's history at now: each is
// numbered after the last, and of the run's current execution unless it
// names one. It returns them as appended, Seq and At set, for the caller.
func (r *run) appendEvents(now time.Time, events ...store.Event) []store.Event {
	out := make([]store.Event, len(events))
	for i, e := range events {
		e.Seq, e.At = int64(len(r.history))+1, now
		if e.Execution == 0 {
			e.Execution = r.Execution
		}
		r.history = append(r.history, cloneEvent(e))
		out[i] = cloneEvent(e)
	}
	r.UpdatedAt = now // a run's updated time is its last event's
	return out
}
