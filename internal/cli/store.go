package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"reprise/internal/redact"
	"reprise/postgres"
	"reprise/sqlite"
	"reprise/store"
)

// defaultDB is the database of the commands that take --db.
const defaultDB = "reprise.db"

// dbUsage is what --db takes, as most commands say it.
const dbUsage = "the `DATABASE`: a SQLite path, sqlite:PATH or postgres://URL"

// dbVar defines the --db flag of fs in p, with its default and usage. A
// value that names no database reprise opens is a usage error when the
// flags are parsed, before anything is opened.
func dbVar(fs *flag.FlagSet, p *string, value, usage string) {
	*p = value
	fs.Var((*dbFlag)(p), "db", usage)
}

// dbFlag is a --db flag's value.
type dbFlag string

func (d *dbFlag) String() string { return redact.String(string(*d)) }

func (d *dbFlag) Set(v string) error {
	if err := checkDB(v); err != nil {
		return err
	}
	*d = dbFlag(v)
	return nil
}

// dbScheme matches the scheme of a URL.
var dbScheme = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*)://`)

// checkDB reports what is wrong with a --db value, without opening it: a
// postgres:// URL that does not parse, or another URL than a sqlite: one.
// Its error holds no password.
func checkDB(db string) error {
	if isPostgresURL(db) {
		_, err := dsnSchema(db) // pgconn's errors hide the password
		return err
	}
	if m := dbScheme.FindStringSubmatch(db); len(m) == 2 && !strings.EqualFold(m[1], "sqlite") {
		return fmt.Errorf("scheme %s: want a SQLite path, sqlite:PATH or postgres://URL", m[1])
	}
	return nil
}

// openStore opens the store a --db value names: "sqlite:PATH", a bare path,
// or a postgres:// URL.
func openStore(ctx context.Context, db string) (store.Store, error) {
	return openStoreWith(ctx, db, postgres.Options{}, sqlite.Options{})
}

// openEngineStore is openStore for a command that runs an engine, with pg,
// the options of a PostgreSQL store but its schema (see openPostgres). It
// locks a SQLite file against every other process that runs an engine on
// it (sqlite.Options.Exclusive): two engines on one file are not safe.
// Commands that only read or write runs beside a server do not lock.
func openEngineStore(ctx context.Context, db string, pg postgres.Options) (store.Store, error) {
	return openStoreWith(ctx, db, pg, sqlite.Options{Exclusive: true})
}

// openStoreWith opens the store db names with the options of its driver.
func openStoreWith(ctx context.Context, db string, pg postgres.Options, lite sqlite.Options) (store.Store, error) {
	switch {
	case db == "":
		return nil, fmt.Errorf("--db is empty")
	case isPostgresURL(db):
		return openPostgres(ctx, db, pg)
	}
	path := strings.TrimPrefix(db, "sqlite:")
	s, err := sqlite.Open(ctx, path, &lite)
	if errors.Is(err, sqlite.ErrLocked) {
		return nil, fmt.Errorf("open %s: %w; a SQLite file serves one engine process at a time: "+
			"stop the other one, or use PostgreSQL (--db postgres://...) for several (docs/operations.md)", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return s, nil
}

func isPostgresURL(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// openPostgres opens the PostgreSQL store at dsn with opts, in the schema
// the DSN's search_path names (dsnSchema).
func openPostgres(ctx context.Context, dsn string, opts postgres.Options) (store.Store, error) {
	schema, err := dsnSchema(dsn)
	if err != nil {
		return nil, fmt.Errorf("--db: %w", err)
	}
	opts.Schema = schema
	s, err := postgres.Open(ctx, dsn, &opts)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	return s, nil
}

// dsnSchema is the schema a postgres:// --db names with search_path (as
// "?search_path=NAME", or "search_path=NAME" in a key=value DSN), or ""
// for the store's default, public. The store sets search_path itself, to
// its one schema, on every connection.
func dsnSchema(dsn string) (string, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "", err
	}
	path := strings.TrimSpace(cfg.RuntimeParams["search_path"])
	if strings.Contains(path, ",") {
		return "", fmt.Errorf("search_path %q names several schemas; reprise keeps its tables in one", path)
	}
	return strings.Trim(path, `"`), nil
}
