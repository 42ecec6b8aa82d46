package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"

	"reprise/store"
)

// live holds the engines running in this process, by database, each with
// the store it started on. One process uses a database file at a time, so
// an engine recorded in the engines table and not live here has died with
// its process; one whose store was closed without EngineStop, too.
var live = struct {
	sync.Mutex
	engines map[string]map[string]*Store // database key → worker id → store
}{engines: make(map[string]map[string]*Store)}

// liveKey names the store's database among the process's: its absolute
// path, or the store itself for a private in-memory database.
func (s *Store) liveKey() string {
	if s.path == ":memory:" {
		return fmt.Sprintf("memory:%p", s)
	}
	if abs, err := filepath.Abs(s.path); err == nil {
		return abs
	}
	return s.path
}

// EngineStart records a live engine under p.ID; ErrEngineLive if one runs
// under it in this process already.
func (s *Store) EngineStart(ctx context.Context, p *store.EngineStartParams) error {
	key := s.liveKey()
	live.Lock()
	if live.engines[key][p.ID] != nil {
		live.Unlock()
		return fmt.Errorf("start engine %s: %w", p.ID, store.ErrEngineLive)
	}
	if live.engines[key] == nil {
		live.engines[key] = make(map[string]*Store)
	}
	live.engines[key][p.ID] = s
	live.Unlock()
	err := s.write(ctx, func(tx *txn) error {
		_, err := tx.exec(`INSERT INTO engines (id, started_at) VALUES (?, ?)
			ON CONFLICT (id) DO UPDATE SET started_at = excluded.started_at`, p.ID, tx.nanos)
		return err
	})
	if err != nil {
		s.forget(p.ID)
		return fmt.Errorf("start engine %s: %w", p.ID, err)
	}
	return nil
}

// EngineStop forgets an engine.
func (s *Store) EngineStop(ctx context.Context, id string) error {
	err := s.write(ctx, func(tx *txn) error {
		_, err := tx.exec(`DELETE FROM engines WHERE id = ?`, id)
		return err
	})
	s.forget(id)
	if err != nil {
		return fmt.Errorf("stop engine %s: %w", id, err)
	}
	return nil
}

// forget drops engine id, or with id "" every engine started on s, from
// the live ones.
func (s *Store) forget(id string) {
	key := s.liveKey()
	live.Lock()
	defer live.Unlock()
	for e, by := range live.engines[key] {
		if by == s && (id == "" || e == id) {
			delete(live.engines[key], e)
		}
	}
	if len(live.engines[key]) == 0 {
		delete(live.engines, key)
	}
}

// EngineGone lists the recorded engines not live in this process.
func (s *Store) EngineGone(ctx context.Context) ([]string, error) {
	var ids []string
	err := s.read(ctx, func(tx *txn) error {
		ids = ids[:0]
		rows, err := tx.query(`SELECT id FROM engines ORDER BY id`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list gone engines: %w", err)
	}
	key := s.liveKey()
	live.Lock()
	defer live.Unlock()
	gone := ids[:0]
	for _, id := range ids {
		if live.engines[key][id] == nil {
			gone = append(gone, id)
		}
	}
	return gone, nil
}

// TaskRelease cuts the live leases of the tasks leased to p.Owner to
// lapse now.
func (s *Store) TaskRelease(ctx context.Context, p *store.TaskReleaseParams) (int, error) {
	var n int64
	err := s.write(ctx, func(tx *txn) error {
		var err error
		n, err = tx.exec(`UPDATE tasks SET lease_until = ? WHERE owner = ? AND lease_until > ?`, tx.nanos, p.Owner, tx.nanos)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("release tasks of %s: %w", p.Owner, err)
	}
	return int(n), nil
}
