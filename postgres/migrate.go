package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"reprise/store"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// A migration is one numbered file of migrations/.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations are the embedded migrations, by version.
var migrations = mustLoadMigrations()

func mustLoadMigrations() []migration {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		panic(err)
	}
	var ms []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		version, err := strconv.Atoi(num)
		if !ok || err != nil || version <= 0 {
			panic(fmt.Sprintf("postgres: migration %q: name must start with a positive version and _", e.Name()))
		}
		b, err := migrationFiles.ReadFile(path.Join("migrations", e.Name()))
		if err != nil {
			panic(err)
		}
		ms = append(ms, migration{version: version, name: e.Name(), sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i, m := range ms {
		if m.version != i+1 {
			panic(fmt.Sprintf("postgres: migration %q: want version %d", m.name, i+1))
		}
	}
	return ms
}

// SchemaVersion is the schema version this binary migrates to.
func SchemaVersion() int { return len(migrations) }

// Migrate brings the database at dsn to this binary's schema version and
// closes its connection. It is what `reprise migrate` runs; Open does the
// same unless Options.NoMigrate. Several processes may migrate at once: an
// advisory lock lets one apply each migration while the others wait. A
// database migrated by a newer reprise is refused with an error wrapping
// reprise.ErrSchemaTooNew and left as it is.
func Migrate(ctx context.Context, dsn string, opts *Options) error {
	cfg, o, err := poolConfig(dsn, opts)
	if err != nil {
		return err
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer pool.Close()
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return migrate(ctx, pool, o.Schema, log)
}

// migrate applies the missing migrations in one transaction, under an
// advisory lock keyed by the schema.
func migrate(ctx context.Context, pool *pgxpool.Pool, schema string, log *slog.Logger) error {
	var applied []int
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", advisoryKey("reprise.migrate."+schema)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS reprise_migration (
			version    integer     PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`); err != nil {
			return err
		}
		current, err := schemaVersion(ctx, tx)
		if err != nil {
			return err
		}
		if current > len(migrations) {
			return tooNew(current)
		}
		for _, m := range migrations[current:] {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO reprise_migration (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
				return err
			}
			applied = append(applied, m.version)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migrate schema %q: %w", schema, err)
	}
	if len(applied) > 0 {
		log.Info("postgres schema migrated", "schema", schema, "versions", applied)
	}
	return nil
}

// checkVersion refuses a schema this binary does not match, without
// changing it.
func checkVersion(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	var exists bool
	err := pool.QueryRow(ctx, "SELECT to_regclass('reprise_migration') IS NOT NULL").Scan(&exists)
	if err != nil {
		return fmt.Errorf("check schema %q: %w", schema, err)
	}
	current := 0
	if exists {
		if current, err = schemaVersion(ctx, pool); err != nil {
			return fmt.Errorf("check schema %q: %w", schema, err)
		}
	}
	switch {
	case current > len(migrations):
		return fmt.Errorf("check schema %q: %w", schema, tooNew(current))
	case current < len(migrations):
		return fmt.Errorf("check schema %q: version %d, this binary needs %d: run reprise migrate", schema, current, len(migrations))
	}
	return nil
}

func schemaVersion(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int, error) {
	var v int
	if err := q.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM reprise_migration").Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

func tooNew(version int) error {
	return fmt.Errorf("version %d, this binary knows %d: %w", version, len(migrations), store.ErrSchemaTooNew)
}
