package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"reprise/store"
)

// stepDefColumns are the columns scanStepDef reads.
const stepDefColumns = `name, version, kind, url, policy, created_at, deleted_at`

func scanStepDef(row scanner) (*store.StepDefinition, error) {
	var d store.StepDefinition
	var created int64
	var deleted sql.NullInt64
	if err := row.Scan(&d.Name, &d.Version, &d.Kind, &d.URL, &d.Policy, &created, &deleted); err != nil {
		return nil, err
	}
	d.CreatedAt = fromNanos(created)
	if deleted.Valid {
		d.DeletedAt = fromNanos(deleted.Int64)
	}
	return &d, nil
}

// latestStepDef returns the greatest version of a step, deleted or not,
// or nil for a name never defined.
func latestStepDef(tx *txn, name string) (*store.StepDefinition, error) {
	d, err := scanStepDef(tx.queryRow(`
		SELECT `+stepDefColumns+` FROM step_definitions WHERE name = ? ORDER BY version DESC LIMIT 1`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return d, err
}

// StepDefine records a new version of a step, or returns the current one
// if it is the same definition.
func (s *Store) StepDefine(ctx context.Context, p *store.StepDefineParams) (*store.StepDefinition, bool, error) {
	var def *store.StepDefinition
	var created bool
	err := s.write(ctx, func(tx *txn) error {
		latest, err := latestStepDef(tx, p.Name)
		if err != nil {
			return err
		}
		version, same, err := p.Next(latest)
		if err != nil || same {
			def, created = latest, false
			return err
		}
		_, err = tx.exec(`
			INSERT INTO step_definitions (name, version, kind, url, policy, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
			p.Name, version, p.Kind, p.URL, p.Policy, tx.nanos)
		if err != nil {
			return err
		}
		def = &store.StepDefinition{Name: p.Name, Version: version, Kind: p.Kind, URL: p.URL, Policy: p.Policy,
			CreatedAt: tx.now}
		created = true
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("define step %s: %w", p.Name, err)
	}
	return def, created, nil
}

// StepDefGet returns a step's current version, or the version asked for.
func (s *Store) StepDefGet(ctx context.Context, p *store.StepDefGetParams) (*store.StepDefinition, error) {
	var def *store.StepDefinition
	err := s.read(ctx, func(tx *txn) error {
		var err error
		if p.Version == 0 {
			def, err = latestStepDef(tx, p.Name)
			if err == nil && (def == nil || !def.DeletedAt.IsZero()) {
				err = store.ErrNotFound
			}
			return err
		}
		def, err = scanStepDef(tx.queryRow(`
			SELECT `+stepDefColumns+` FROM step_definitions WHERE name = ? AND version = ?`, p.Name, p.Version))
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get step %s version %d: %w", p.Name, p.Version, err)
	}
	return def, nil
}

// StepDefList returns the current version of each step not deleted.
func (s *Store) StepDefList(ctx context.Context, _ *store.StepDefListParams) ([]*store.StepDefinition, error) {
	defs := []*store.StepDefinition{}
	err := s.read(ctx, func(tx *txn) error {
		rows, err := tx.query(`
			SELECT ` + stepDefColumns + ` FROM step_definitions d
			WHERE version = (SELECT max(version) FROM step_definitions WHERE name = d.name) AND deleted_at IS NULL
			ORDER BY name`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			d, err := scanStepDef(rows)
			if err != nil {
				return err
			}
			defs = append(defs, d)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list steps: %w", err)
	}
	return defs, nil
}

// StepDefDelete deletes a step unless it is in use.
func (s *Store) StepDefDelete(ctx context.Context, p *store.StepDefDeleteParams) error {
	err := s.write(ctx, func(tx *txn) error {
		latest, err := latestStepDef(tx, p.Name)
		if err != nil {
			return err
		}
		if latest == nil || !latest.DeletedAt.IsZero() {
			return store.ErrNotFound
		}
		if !p.Force {
			var runID string
			err := tx.queryRow(`SELECT run_id FROM tasks WHERE step = ? LIMIT 1`, p.Name).Scan(&runID)
			if err == nil {
				return fmt.Errorf("%w: run %s has a task of it", store.ErrStepInUse, runID)
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			for _, wf := range p.Workflows {
				err := tx.queryRow(`
					SELECT id FROM runs WHERE workflow = ? AND status IN ('pending', 'running') LIMIT 1`, wf).Scan(&runID)
				if err == nil {
					return fmt.Errorf("%w: run %s of workflow %s is active", store.ErrStepInUse, runID, wf)
				}
				if !errors.Is(err, sql.ErrNoRows) {
					return err
				}
			}
		}
		_, err = tx.exec(`UPDATE step_definitions SET deleted_at = ? WHERE name = ? AND deleted_at IS NULL`,
			tx.nanos, p.Name)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete step %s: %w", p.Name, err)
	}
	return nil
}
