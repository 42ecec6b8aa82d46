package postgres

import (
	"context"

	"reprise"
)

// Merged returns how many statements s sent for several transitions at
// once (merge.go, ahead.go).
func Merged(s *Store) int64 { return s.merged.Load() }

// QueuedTransitions returns how many transitions wait for a group.
func QueuedTransitions(s *Store) int {
	s.committer.mu.Lock()
	defer s.committer.mu.Unlock()
	return len(s.committer.queue)
}

// Histories reads the histories of ps in one statement, as HistoryList
// calls that arrive together are read, and returns each one's events and
// error.
func Histories(ctx context.Context, s *Store, ps []reprise.HistoryListParams) ([][]reprise.Event, []error) {
	reads := make([]*historyRead, len(ps))
	for i := range ps {
		reads[i] = &historyRead{p: &ps[i]}
	}
	s.histories(ctx, reads)
	events := make([][]reprise.Event, len(ps))
	errs := make([]error, len(ps))
	for i, r := range reads {
		events[i], errs[i] = r.events, r.err
	}
	return events, errs
}
