package postgres

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"reprise/store"
)

// TaskListWaiting returns the tasks ready for at least p.ReadyFor that no
// one holds, oldest ready first. A run's own are found by its key; the
// list of all scans the ready tasks, which a report every few seconds can
// afford and the claim path, which never calls it, need not index for.
func (s *Store) TaskListWaiting(ctx context.Context, p *store.TaskListWaitingParams) ([]store.WaitingTask, error) {
	const columns = `SELECT id, run_id, position, step, ready_at FROM reprise_task `
	const ready = `owner = '' AND ready_at <= coalesce($1::timestamptz, statement_timestamp()) - $2::interval`
	readyFor, limit := max(p.ReadyFor, 0), cmp.Or(p.Limit, 100)
	var rows pgx.Rows
	var err error
	if p.RunID != "" {
		rows, err = s.pool.Query(ctx, columns+`WHERE run_id = $4 AND `+ready+` ORDER BY ready_at, id LIMIT $3`,
			s.clock(), readyFor, limit, p.RunID)
	} else {
		rows, err = s.pool.Query(ctx, columns+`WHERE `+ready+` ORDER BY ready_at, id LIMIT $3`,
			s.clock(), readyFor, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("list waiting tasks: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.WaitingTask, error) {
		var w store.WaitingTask
		var readyAt time.Time
		err := row.Scan(&w.TaskID, &w.RunID, &w.Position, &w.Step, &readyAt)
		w.ReadyAt = readyAt.UTC()
		return w, err
	})
	if err != nil {
		return nil, fmt.Errorf("list waiting tasks: %w", err)
	}
	return out, nil
}
