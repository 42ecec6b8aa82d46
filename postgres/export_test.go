package postgres

// Merged returns how many statements s sent for several transitions at
// once (merge.go, ahead.go).
func Merged(s *Store) int64 { return s.merged.Load() }

// QueuedTransitions returns how many transitions wait for a group.
func QueuedTransitions(s *Store) int {
	s.committer.mu.Lock()
	defer s.committer.mu.Unlock()
	return len(s.committer.queue)
}
