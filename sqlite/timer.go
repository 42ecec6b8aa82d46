package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"reprise/store"
)

// TimerFire fires due timers, earliest first: appends TimerFired for each
// and deletes it. It returns one Outcome per run.
func (s *Store) TimerFire(ctx context.Context, p *store.TimerFireParams) ([]*store.Outcome, error) {
	var outcomes []*store.Outcome
	err := s.write(ctx, func(tx *txn) error {
		outcomes = outcomes[:0]
		rows, err := tx.query(`
			DELETE FROM timers WHERE id IN (
				SELECT id FROM timers WHERE fire_at <= ? ORDER BY fire_at, id LIMIT +?)
			RETURNING id, run_id, execution, position, fire_at`, tx.nanos, cmp.Or(p.Limit, 100))
		if err != nil {
			return err
		}
		type timer struct {
			id, fireAt int64
			runID      string
			execution  int
			position   int
		}
		var fired []timer
		for rows.Next() {
			var t timer
			if err := rows.Scan(&t.id, &t.runID, &t.execution, &t.position, &t.fireAt); err != nil {
				rows.Close()
				return err
			}
			fired = append(fired, t)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		slices.SortFunc(fired, func(a, b timer) int { return cmp.Or(cmp.Compare(a.fireAt, b.fireAt), cmp.Compare(a.id, b.id)) })

		// One outcome per run, in the order of their first timer.
		var runs []string
		byRun := map[string][]store.Event{}
		for _, t := range fired {
			if byRun[t.runID] == nil {
				runs = append(runs, t.runID)
			}
			byRun[t.runID] = append(byRun[t.runID], store.TimerFired(t.execution, t.position))
		}
		for _, id := range runs {
			out, err := tx.outcome(id, byRun[id]...)
			if err != nil {
				return err
			}
			outcomes = append(outcomes, out)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("fire timers: %w", err)
	}
	return outcomes, nil
}

// NextWake returns the earliest ready time of an unleased task of the
// given steps (any step when nil), the earliest lease expiry and the
// earliest timer.
func (s *Store) NextWake(ctx context.Context, p *store.NextWakeParams) (store.Wake, error) {
	var w store.Wake
	err := s.read(ctx, func(tx *txn) error {
		w = store.Wake{}
		earliest := func(query string, args ...any) (time.Time, error) {
			var n sql.NullInt64
			if err := tx.queryRow(query, args...).Scan(&n); err != nil || !n.Valid {
				return time.Time{}, err
			}
			return fromNanos(n.Int64), nil
		}
		var err error
		if p.Steps == nil {
			w.Task, err = earliest(`SELECT min(ready_at) FROM tasks WHERE lease_until IS NULL`)
			if err != nil {
				return err
			}
		}
		// One indexed lookup per step name.
		for _, step := range p.Steps {
			t, err := earliest(`SELECT min(ready_at) FROM tasks WHERE step = ? AND lease_until IS NULL`, step)
			if err != nil {
				return err
			}
			if !t.IsZero() && (w.Task.IsZero() || t.Before(w.Task)) {
				w.Task = t
			}
		}
		if w.Lease, err = earliest(`SELECT min(lease_until) FROM tasks WHERE lease_until IS NOT NULL`); err != nil {
			return err
		}
		w.Timer, err = earliest(`SELECT min(fire_at) FROM timers`)
		return err
	})
	if err != nil {
		return store.Wake{}, fmt.Errorf("next wake: %w", err)
	}
	return w, nil
}
