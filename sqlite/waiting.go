package sqlite

import (
	"cmp"
	"context"
	"fmt"

	"reprise/store"
)

// TaskListWaiting returns the tasks ready for at least p.ReadyFor that no
// one holds, oldest ready first. A run's own are found by its key; the
// list of all scans the ready tasks, which a report every few seconds can
// afford and the claim path, which never calls it, need not index for.
func (s *Store) TaskListWaiting(ctx context.Context, p *store.TaskListWaitingParams) ([]store.WaitingTask, error) {
	var out []store.WaitingTask
	err := s.read(ctx, func(tx *txn) error {
		out = out[:0]
		before := tx.nanos - int64(max(p.ReadyFor, 0))
		limit := cmp.Or(p.Limit, 100)
		const columns = `SELECT id, run_id, position, step, ready_at FROM tasks`
		var r *rows
		var err error
		if p.RunID != "" {
			r, err = tx.query(columns+` WHERE run_id = ? AND lease_until IS NULL AND ready_at <= ?
				ORDER BY ready_at, id LIMIT +?`, p.RunID, before, limit)
		} else {
			r, err = tx.query(columns+` WHERE lease_until IS NULL AND ready_at <= ?
				ORDER BY ready_at, id LIMIT +?`, before, limit)
		}
		if err != nil {
			return err
		}
		defer r.Close()
		for r.Next() {
			var w store.WaitingTask
			var readyAt int64
			if err := r.Scan(&w.TaskID, &w.RunID, &w.Position, &w.Step, &readyAt); err != nil {
				return err
			}
			w.ReadyAt = fromNanos(readyAt)
			out = append(out, w)
		}
		return r.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list waiting tasks: %w", err)
	}
	return out, nil
}
