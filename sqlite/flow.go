package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"reprise/store"
)

// flowColumns are the columns scanFlow reads.
const flowColumns = `name, version, flow, created_at`

func scanFlow(row scanner) (*store.FlowDefinition, error) {
	var d store.FlowDefinition
	var doc string
	var created int64
	if err := row.Scan(&d.Name, &d.Version, &doc, &created); err != nil {
		return nil, err
	}
	d.Flow, d.CreatedAt = []byte(doc), fromNanos(created)
	return &d, nil
}

// latestFlowSQL reads the greatest version of a flow.
const latestFlowSQL = `SELECT ` + flowColumns + ` FROM flows WHERE name = ? ORDER BY version DESC LIMIT 1`

// FlowPut records a new version of a flow, or returns the latest one if
// it holds the same flow.
func (s *Store) FlowPut(ctx context.Context, p *store.FlowPutParams) (*store.FlowDefinition, bool, error) {
	var def *store.FlowDefinition
	var created bool
	err := s.write(ctx, func(tx *txn) error {
		latest, err := scanFlow(tx.queryRow(latestFlowSQL, p.Name))
		if errors.Is(err, sql.ErrNoRows) {
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
		if _, err := tx.exec(`INSERT INTO flows (name, version, flow, created_at) VALUES (?, ?, ?, ?)`,
			p.Name, version, string(p.Flow), tx.nanos); err != nil {
			return err
		}
		def = &store.FlowDefinition{Name: p.Name, Version: version, Flow: append([]byte(nil), p.Flow...), CreatedAt: tx.now}
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
	var def *store.FlowDefinition
	err := s.read(ctx, func(tx *txn) error {
		var err error
		if p.Version == 0 {
			def, err = scanFlow(tx.queryRow(latestFlowSQL, p.Name))
		} else {
			def, err = scanFlow(tx.queryRow(`SELECT `+flowColumns+` FROM flows WHERE name = ? AND version = ?`,
				p.Name, p.Version))
		}
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get flow %s version %d: %w", p.Name, p.Version, err)
	}
	return def, nil
}

// FlowList returns the latest version of each flow, by name.
func (s *Store) FlowList(ctx context.Context, _ *store.FlowListParams) ([]*store.FlowDefinition, error) {
	defs := []*store.FlowDefinition{}
	err := s.read(ctx, func(tx *txn) error {
		rows, err := tx.query(`
			SELECT ` + flowColumns + ` FROM flows f
			WHERE version = (SELECT max(version) FROM flows WHERE name = f.name)
			ORDER BY name`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			d, err := scanFlow(rows)
			if err != nil {
				return err
			}
			defs = append(defs, d)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list flows: %w", err)
	}
	return defs, nil
}
