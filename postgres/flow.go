package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"reprise/postgres/internal/pgtx"
	"reprise/store"
)

// flowColumns are the columns scanFlow reads.
const flowColumns = `name, version, flow, created_at`

func scanFlow(row pgx.Row) (*store.FlowDefinition, error) {
	var d store.FlowDefinition
	var doc string
	if err := row.Scan(&d.Name, &d.Version, &doc, &d.CreatedAt); err != nil {
		return nil, err
	}
	d.Flow, d.CreatedAt = []byte(doc), d.CreatedAt.UTC()
	return &d, nil
}

// latestFlowSQL reads the greatest version of a flow.
const latestFlowSQL = `SELECT ` + flowColumns + ` FROM reprise_flow WHERE name = $1 ORDER BY version DESC LIMIT 1`

// FlowPut records a new version of a flow, or returns the latest one if
// it holds the same flow.
func (s *Store) FlowPut(ctx context.Context, p *store.FlowPutParams) (*store.FlowDefinition, bool, error) {
	var def *store.FlowDefinition
	var created bool
	err := s.committer.Alone(ctx, func(tx *pgtx.Tx) error {
		now, err := s.lockName(ctx, tx, "reprise flow", p.Name)
		if err != nil {
			return err
		}
		latest, err := scanFlow(tx.QueryRow(ctx, latestFlowSQL, p.Name))
		if errors.Is(err, pgx.ErrNoRows) {
			latest, err = nil, nil
		}
		if err != nil {
			return err
		}
		version, same, err := p.Next(latest)
		if err != nil || same {
			def = latest
			return err
		}
		tx.Queue(`INSERT INTO reprise_flow (name, version, flow, created_at) VALUES ($1, $2, $3, $4)`,
			p.Name, version, string(p.Flow), now)
		def = &store.FlowDefinition{Name: p.Name, Version: version, Flow: append([]byte(nil), p.Flow...), CreatedAt: now}
		created = true
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("put flow %s: %w", p.Name, err)
	}
	return def, created, nil
}

// FlowGet returns a flow's latest version, or the version asked for.
func (s *Store) FlowGet(ctx context.Context, p *store.FlowGetParams) (*store.FlowDefinition, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("get flow %s version %d: %w", p.Name, p.Version, err)
	}
	query, args := latestFlowSQL, []any{p.Name}
	if p.Version != 0 {
		query, args = `SELECT `+flowColumns+` FROM reprise_flow WHERE name = $1 AND version = $2`, []any{p.Name, p.Version}
	}
	def, err := scanFlow(s.pool.QueryRow(ctx, query, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get flow %s version %d: %w", p.Name, p.Version, err)
	}
	return def, nil
}

// FlowList returns the latest version of each flow, by name.
func (s *Store) FlowList(ctx context.Context, _ *store.FlowListParams) ([]*store.FlowDefinition, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT ON (name) `+flowColumns+` FROM reprise_flow ORDER BY name, version DESC`)
	if err != nil {
		return nil, fmt.Errorf("list flows: %w", err)
	}
	defs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*store.FlowDefinition, error) { return scanFlow(row) })
	if err != nil {
		return nil, fmt.Errorf("list flows: %w", err)
	}
	return defs, nil
}
