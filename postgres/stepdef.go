package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"reprise/postgres/internal/pgtx"
	"reprise/store"
)

// stepDefColumns are the columns scanStepDef reads.
const stepDefColumns = `name, version, kind, url, policy, created_at, deleted_at`

func scanStepDef(row pgx.Row) (*store.StepDefinition, error) {
	var d store.StepDefinition
	var deleted *time.Time
	if err := row.Scan(&d.Name, &d.Version, &d.Kind, &d.URL, &d.Policy, &d.CreatedAt, &deleted); err != nil {
		return nil, err
	}
	d.CreatedAt, d.DeletedAt = d.CreatedAt.UTC(), utc(deleted)
	return &d, nil
}

// latestStepDefSQL reads the greatest version of a step, deleted or not.
const latestStepDefSQL = `SELECT ` + stepDefColumns + ` FROM reprise_step_def WHERE name = $1 ORDER BY version DESC LIMIT 1`

// lockStepDef serializes the writes of one step's definitions, and
// returns the store's time and the step's greatest version, or nil for a
// name never defined.
func (s *Store) lockStepDef(ctx context.Context, tx *pgtx.Tx, name string) (time.Time, *store.StepDefinition, error) {
	now, err := s.lockName(ctx, tx, "reprise step", name)
	if err != nil {
		return now, nil, err
	}
	latest, err := scanStepDef(tx.QueryRow(ctx, latestStepDefSQL, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return now, nil, nil
	}
	return now, latest, err
}

// lockName serializes, until tx ends, the writes of the definitions
// (kind: step, flow) of one name, and returns the store's time.
func (s *Store) lockName(ctx context.Context, tx *pgtx.Tx, kind, name string) (time.Time, error) {
	var now time.Time
	err := tx.QueryRow(ctx, `SELECT coalesce($1::timestamptz, statement_timestamp()) FROM (SELECT pg_advisory_xact_lock($2)) l`,
		s.clock(), advisoryKey(kind+"\x00"+s.schema+"\x00"+name)).Scan(&now)
	return now.UTC(), err
}

// StepDefine records a new version of a step, or returns the current one
// if it is the same definition.
func (s *Store) StepDefine(ctx context.Context, p *store.StepDefineParams) (*store.StepDefinition, bool, error) {
	var def *store.StepDefinition
	var created bool
	err := s.committer.Alone(ctx, func(tx *pgtx.Tx) error {
		now, latest, err := s.lockStepDef(ctx, tx, p.Name)
		if err != nil {
			return err
		}
		version, same, err := p.Next(latest)
		if err != nil || same {
			def, created = latest, false
			return err
		}
		tx.Queue(`
			INSERT INTO reprise_step_def (name, version, kind, url, policy, created_at) VALUES ($1, $2, $3, $4, $5, $6)`,
			p.Name, version, p.Kind, p.URL, p.Policy, now)
		def = &store.StepDefinition{Name: p.Name, Version: version, Kind: p.Kind, URL: p.URL, Policy: p.Policy,
			CreatedAt: now}
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
	var (
		def *store.StepDefinition
		err error
	)
	if p.Version == 0 {
		def, err = scanStepDef(s.pool.QueryRow(ctx, latestStepDefSQL, p.Name))
		if err == nil && !def.DeletedAt.IsZero() {
			err = store.ErrNotFound
		}
	} else {
		def, err = scanStepDef(s.pool.QueryRow(ctx, `
			SELECT `+stepDefColumns+` FROM reprise_step_def WHERE name = $1 AND version = $2`, p.Name, p.Version))
	}
	if errors.Is(err, pgx.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get step %s version %d: %w", p.Name, p.Version, err)
	}
	return def, nil
}

// StepDefList returns the current version of each step not deleted.
func (s *Store) StepDefList(ctx context.Context, _ *store.StepDefListParams) ([]*store.StepDefinition, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT DISTINCT ON (name) `+stepDefColumns+` FROM reprise_step_def
		ORDER BY name, version DESC`)
	if err != nil {
		return nil, fmt.Errorf("list steps: %w", err)
	}
	all, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*store.StepDefinition, error) { return scanStepDef(row) })
	if err != nil {
		return nil, fmt.Errorf("list steps: %w", err)
	}
	defs := make([]*store.StepDefinition, 0, len(all))
	for _, d := range all {
		if d.DeletedAt.IsZero() {
			defs = append(defs, d)
		}
	}
	return defs, nil
}

// StepDefDelete deletes a step unless it is in use.
func (s *Store) StepDefDelete(ctx context.Context, p *store.StepDefDeleteParams) error {
	err := s.committer.Alone(ctx, func(tx *pgtx.Tx) error {
		now, latest, err := s.lockStepDef(ctx, tx, p.Name)
		if err != nil {
			return err
		}
		if latest == nil || !latest.DeletedAt.IsZero() {
			return store.ErrNotFound
		}
		if !p.Force {
			var runID, workflow string
			err := tx.QueryRow(ctx, `
				SELECT run_id, '' FROM (SELECT run_id FROM reprise_task WHERE step = $1 LIMIT 1) t
				UNION ALL
				SELECT id, workflow FROM (
					SELECT id, workflow FROM reprise_run
					WHERE workflow = ANY($2::text[]) AND status IN ('pending', 'running') LIMIT 1) r
				LIMIT 1`, p.Name, p.Workflows).Scan(&runID, &workflow)
			switch {
			case err == nil && workflow == "":
				return fmt.Errorf("%w: run %s has a task of it", store.ErrStepInUse, runID)
			case err == nil:
				return fmt.Errorf("%w: run %s of workflow %s is active", store.ErrStepInUse, runID, workflow)
			case !errors.Is(err, pgx.ErrNoRows):
				return err
			}
		}
		tx.Queue(`UPDATE reprise_step_def SET deleted_at = $2 WHERE name = $1 AND deleted_at IS NULL`, p.Name, now)
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete step %s: %w", p.Name, err)
	}
	return nil
}
