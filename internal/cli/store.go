package cli

import (
	"context"
	"fmt"
	"strings"

	"reprise"
	"reprise/postgres"
	"reprise/sqlite"
)

// defaultDB is the database of the commands that take --db.
const defaultDB = "reprise.db"

// openStore opens the store a --db value names: "sqlite:PATH", a bare path,
// or a postgres:// URL.
func openStore(ctx context.Context, db string) (reprise.Store, error) {
	switch {
	case db == "":
		return nil, fmt.Errorf("--db is empty")
	case isPostgresURL(db):
		return openPostgres(ctx, db, nil)
	}
	path := strings.TrimPrefix(db, "sqlite:")
	s, err := sqlite.Open(path, nil)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return s, nil
}

func isPostgresURL(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// openPostgres opens the PostgreSQL store at dsn with opts (nil: the
// defaults).
func openPostgres(ctx context.Context, dsn string, opts *postgres.Options) (reprise.Store, error) {
	s, err := postgres.Open(ctx, dsn, opts)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	return s, nil
}
