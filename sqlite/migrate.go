package sqlite

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"reprise/store"
)

// migrationFiles holds the schema's versions, named NNNN_what.sql.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// A migration takes the schema from Version-1 to Version.
type migration struct {
	Version int
	Name    string
	SQL     string
}

// migrations returns the embedded migrations in order, checking that their
// versions run 1, 2, 3... without gaps.
func migrations() ([]migration, error) {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for i, name := range names { // Glob sorts
		base := path.Base(name)
		prefix, _, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(prefix)
		if err != nil || v != i+1 {
			return nil, fmt.Errorf("migration %s: want version %d", base, i+1)
		}
		b, err := migrationFiles.ReadFile(name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{Version: v, Name: base, SQL: string(b)})
	}
	return ms, nil
}

// Migrate brings the database to this version's schema, applying the
// migrations it lacks in one transaction. It is idempotent, and safe while
// other processes use the database. Open calls it; the `reprise migrate`
// command calls it on its own.
//
// The schema version is SQLite's user_version. A database at a version
// newer than this package knows gives an error wrapping
// reprise.ErrSchemaTooNew, and is left alone.
func (s *Store) Migrate(ctx context.Context) error {
	if err := s.migrate(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	var from int
	var applied []string
	err = s.write(ctx, func(tx *txn) error {
		applied = applied[:0]
		if err := tx.queryRow("PRAGMA user_version").Scan(&from); err != nil {
			return err
		}
		if from > len(ms) {
			return fmt.Errorf("%w: database is at version %d, this reprise knows %d", store.ErrSchemaTooNew, from, len(ms))
		}
		for _, m := range ms[from:] {
			// The connection, not a prepared statement: a migration holds
			// several statements.
			if err := tx.c.script(tx.ctx, m.SQL); err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
			applied = append(applied, m.Name)
		}
		if len(applied) == 0 {
			return nil
		}
		return tx.c.script(tx.ctx, fmt.Sprintf("PRAGMA user_version = %d", len(ms)))
	})
	if err != nil {
		return err
	}
	for _, name := range applied {
		s.logger.Info("applied migration", "migration", name, "path", s.path)
	}
	return nil
}

// SchemaVersion is the schema version this binary migrates to.
func SchemaVersion() int {
	ms, err := migrations()
	if err != nil {
		panic(err) // the embedded files are checked by the tests
	}
	return len(ms)
}
