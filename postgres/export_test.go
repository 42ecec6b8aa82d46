package postgres

// QueuedTransitions returns how many transitions wait for a group.
func QueuedTransitions(s *Store) int {
	s.committer.mu.Lock()
	defer s.committer.mu.Unlock()
	return len(s.committer.queue)
}
