package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"reprise/postgres/internal/pgtx"
	"reprise/store"
)

// TimerFire fires up to p.Limit (zero: 100) due timers, earliest first: it
// appends TimerFired for each and returns one Outcome per run. Like
// TaskClaim it skips rows other transactions hold and never waits.
func (s *Store) TimerFire(ctx context.Context, p *store.TimerFireParams) ([]*store.Outcome, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	var outcomes []*store.Outcome
	err := s.committer.Run(ctx, func(tx *pgtx.Tx) error {
		outcomes = nil // tx may run this again
		rows, err := tx.Query(ctx, `
			WITH c AS (SELECT coalesce($1::timestamptz, statement_timestamp()) AS now),
			due AS (
				SELECT id AS timer_id, run_id AS timer_run, execution AS timer_execution, position, fire_at
				FROM reprise_timer
				WHERE fire_at <= (SELECT now FROM c)
				ORDER BY fire_at, id
				LIMIT $2
				FOR UPDATE SKIP LOCKED),
			runs AS (
				SELECT id AS head_id, execution, last_seq, updated_at, owner FROM reprise_run
				WHERE id IN (SELECT timer_run FROM due)
				ORDER BY id
				FOR UPDATE SKIP LOCKED)
			SELECT timer_id, timer_execution, position, head_id, execution, last_seq, updated_at, owner, c.now
			FROM due JOIN runs ON head_id = timer_run, c
			ORDER BY fire_at, timer_id`,
			s.clock(), limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		type due struct {
			id    int64
			head  *runHead
			event store.Event
		}
		var (
			timers []due
			heads  = map[string]*runHead{}
			order  []*runHead
			now    time.Time
		)
		for rows.Next() {
			var (
				d                   due
				h                   runHead
				execution, position int
			)
			err := rows.Scan(&d.id, &execution, &position,
				&h.id, &h.execution, &h.lastSeq, &h.updatedAt, &h.owner, &now)
			if err != nil {
				return err
			}
			d.event = store.TimerFired(execution, position)
			if heads[h.id] == nil {
				heads[h.id] = &h
				order = append(order, &h)
			}
			d.head = heads[h.id]
			timers = append(timers, d)
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(timers) == 0 {
			return err
		}
		a := newAppender(now.UTC())
		ids := make([]int64, len(timers))
		for i, d := range timers {
			ids[i] = d.id
			if err := a.add(d.head, d.event); err != nil {
				return err
			}
		}
		tx.Queue(`DELETE FROM reprise_timer WHERE id = ANY($1)`, ids)
		a.queue(tx)
		for _, h := range order {
			tx.Notify(Notice{Kind: NoticeOutcome, RunID: h.id, Owner: h.owner, Seq: h.lastSeq})
			outcomes = append(outcomes, &store.Outcome{RunID: h.id, Owner: h.owner, Events: a.eventsOf(h)})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("fire timers: %w", err)
	}
	return outcomes, nil
}

// NextWake returns the earliest ready time of an unleased task of p.Steps
// (nil: any step), the earliest lease expiry and the earliest timer; each is
// zero when there is none.
func (s *Store) NextWake(ctx context.Context, p *store.NextWakeParams) (store.Wake, error) {
	// For any step, the earliest ready time is the smallest over the claim
	// index; per step, the first entry of each step's part of it.
	const wake = `SELECT %s,
		(SELECT min(lease_until) FROM reprise_task WHERE owner <> ''),
		(SELECT min(fire_at) FROM reprise_timer)`
	var row pgx.Row
	if p.Steps == nil {
		row = s.pool.QueryRow(ctx, fmt.Sprintf(wake, `(SELECT min(ready_at) FROM reprise_task WHERE owner = '')`))
	} else {
		row = s.pool.QueryRow(ctx, fmt.Sprintf(wake, `(SELECT min(first) FROM unnest($1::text[]) AS q(step), LATERAL (
			SELECT ready_at AS first FROM reprise_task
			WHERE step = q.step AND owner = ''
			ORDER BY ready_at LIMIT 1) x)`), p.Steps)
	}
	var task, lease, timer *time.Time
	err := row.Scan(&task, &lease, &timer)
	if err != nil {
		return store.Wake{}, fmt.Errorf("next wake: %w", err)
	}
	return store.Wake{Task: utc(task), Lease: utc(lease), Timer: utc(timer)}, nil
}
