package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"reprise/store"
)

// An engine's liveness is a session-level advisory lock, held on a
// connection of its own for the engine's life: PostgreSQL releases it when
// that connection ends, however the process ends, so any other process
// can tell a crashed engine from a live one without waiting for a lease to
// lapse. (A pooler in transaction mode would break this; see
// docs/postgres.md.)

// engineKey is the advisory lock key of an engine's worker id, within the
// store's schema.
func (s *Store) engineKey(id string) int64 {
	return advisoryKey("reprise engine\x00" + s.schema + "\x00" + id)
}

// EngineStart takes the engine's lock on a connection of its own and
// records it; ErrEngineLive if another session holds the lock.
func (s *Store) EngineStart(ctx context.Context, p *store.EngineStartParams) error {
	key := s.engineKey(p.ID)
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("start engine %s: %w", p.ID, err)
	}
	var locked bool
	if err := c.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&locked); err != nil {
		c.Release()
		return fmt.Errorf("start engine %s: %w", p.ID, err)
	}
	if !locked {
		c.Release()
		return fmt.Errorf("start engine %s: %w", p.ID, store.ErrEngineLive)
	}
	conn := c.Hijack() // out of the pool: the lock lives as long as it
	_, err = s.pool.Exec(ctx, `
		INSERT INTO reprise_engine (id, lock_key, started_at)
		VALUES ($1, $2, coalesce($3::timestamptz, statement_timestamp()))
		ON CONFLICT (id) DO UPDATE SET lock_key = excluded.lock_key, started_at = excluded.started_at`,
		p.ID, key, s.clock())
	if err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return fmt.Errorf("start engine %s: %w", p.ID, err)
	}
	s.enginesMu.Lock()
	s.engines[p.ID] = conn
	s.enginesMu.Unlock()
	return nil
}

// EngineStop forgets an engine and, if this store holds its lock, lets
// the lock go.
func (s *Store) EngineStop(ctx context.Context, id string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM reprise_engine WHERE id = $1`, id)
	s.enginesMu.Lock()
	conn := s.engines[id]
	delete(s.engines, id)
	s.enginesMu.Unlock()
	if conn != nil {
		err = errors.Join(err, s.unlockEngine(ctx, id, conn))
	}
	if err != nil {
		return fmt.Errorf("stop engine %s: %w", id, err)
	}
	return nil
}

// unlockEngine lets go of an engine's lock and closes its connection. It
// unlocks first: the end of the session, which would release the lock
// too, completes only after Close returns.
func (s *Store) unlockEngine(ctx context.Context, id string, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, s.engineKey(id))
	return errors.Join(err, conn.Close(context.WithoutCancel(ctx)))
}

// EngineGone lists the recorded engines whose lock no session holds. It
// tries each lock on one connection and lets go of those it got at once.
// First it takes again the locks of this store's own engines whose
// connections broke (the server restarted, say).
func (s *Store) EngineGone(ctx context.Context) ([]string, error) {
	s.relock(ctx)
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("list gone engines: %w", err)
	}
	defer c.Release()
	rows, err := c.Query(ctx, `SELECT id, lock_key FROM reprise_engine ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list gone engines: %w", err)
	}
	type engine struct {
		id  string
		key int64
	}
	engines, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (engine, error) {
		var e engine
		err := row.Scan(&e.id, &e.key)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("list gone engines: %w", err)
	}
	var gone []string
	for _, e := range engines {
		var free bool
		err := c.QueryRow(ctx, `
			SELECT CASE WHEN pg_try_advisory_lock($1) THEN pg_advisory_unlock($1) ELSE false END`, e.key).Scan(&free)
		if err != nil {
			return nil, fmt.Errorf("list gone engines: %w", err)
		}
		if free {
			gone = append(gone, e.id)
		}
	}
	return gone, nil
}

// TaskRelease cuts the live leases of the tasks leased to p.Owner to
// lapse now. Like a heartbeat, it writes the lease alone, without its
// run's lock: the owner is gone and writes nothing more.
func (s *Store) TaskRelease(ctx context.Context, p *store.TaskReleaseParams) (int, error) {
	tag, err := s.pool.Exec(ctx, `
		WITH c AS (SELECT coalesce($1::timestamptz, statement_timestamp()) AS now)
		UPDATE reprise_task SET lease_until = c.now
		FROM c
		WHERE owner = $2 AND lease_until > c.now`,
		s.clock(), p.Owner)
	if err != nil {
		return 0, fmt.Errorf("release tasks of %s: %w", p.Owner, err)
	}
	return int(tag.RowsAffected()), nil
}

// relock takes again, on new connections, the locks of this store's
// engines whose connections no longer answer, and records them again if
// another engine took them for gone and forgot them meanwhile.
func (s *Store) relock(ctx context.Context) {
	s.enginesMu.Lock()
	defer s.enginesMu.Unlock()
	for id, conn := range s.engines {
		if conn.Ping(ctx) == nil {
			continue
		}
		conn.Close(context.WithoutCancel(ctx))
		delete(s.engines, id)
		c, err := s.pool.Acquire(ctx)
		if err != nil {
			s.log.Warn("engine lock lost; taking it again failed", "worker_id", id, "err", err)
			continue
		}
		var locked bool
		if err := c.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, s.engineKey(id)).Scan(&locked); err != nil || !locked {
			c.Release()
			s.log.Warn("engine lock lost, and taken since by another session", "worker_id", id, "err", err)
			continue
		}
		conn := c.Hijack()
		_, err = conn.Exec(ctx, `
			INSERT INTO reprise_engine (id, lock_key, started_at)
			VALUES ($1, $2, coalesce($3::timestamptz, statement_timestamp()))
			ON CONFLICT (id) DO NOTHING`, id, s.engineKey(id), s.clock())
		if err != nil {
			s.log.Warn("engine lock taken again; recording it failed", "worker_id", id, "err", err)
		}
		s.engines[id] = conn
	}
}
