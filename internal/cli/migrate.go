package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"reprise/postgres"
	"reprise/sqlite"
	"reprise/store"
)

// migrateMain is `reprise migrate`: it brings a database to this binary's
// schema version and prints that version. A database migrated by a newer
// reprise is refused and left as it is.
func migrateMain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("migrate", "[--db DATABASE] [--schema NAME]")
	db := new(string)
	dbVar(fs, db, defaultDB, dbUsage)
	schema := fs.String("schema", "", "PostgreSQL schema that holds reprise's tables (default: the --db URL's search_path, or public)")
	pos, code, ok := parseArgs(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageErrorf(fs, stderr, "unexpected argument %q", pos[0])
	}
	ctx := context.Background()
	version, where, err := migrateDB(ctx, *db, *schema)
	if errors.Is(err, store.ErrSchemaTooNew) {
		fmt.Fprintf(stderr, "reprise migrate: %s was migrated by a newer reprise; use that version or a newer one (%v)\n", where, err)
		return exitFail
	}
	if err != nil {
		fmt.Fprintf(stderr, "reprise migrate: %s: %v\n", where, err)
		return exitFail
	}
	fmt.Fprintf(stdout, "%s: schema version %d\n", where, version)
	return exitOK
}

// migrateDB migrates the database a --db value names, and returns the
// schema version it is at and how to name it in messages.
func migrateDB(ctx context.Context, db, schema string) (version int, where string, err error) {
	switch {
	case db == "":
		return 0, "--db", errors.New("empty")
	case isPostgresURL(db):
		named, err := dsnSchema(db)
		if err != nil {
			return 0, "--db", err
		}
		if schema != "" && named != "" && named != schema {
			return 0, "--db", fmt.Errorf("search_path %q and --schema %q name different schemas", named, schema)
		}
		schema = cmp.Or(schema, named, "public")
		where = fmt.Sprintf("postgres schema %q", schema)
		if err := postgres.Migrate(ctx, db, &postgres.Options{Schema: schema}); err != nil {
			return 0, where, err
		}
		return postgres.SchemaVersion(), where, nil
	}
	path := strings.TrimPrefix(db, "sqlite:")
	where = "sqlite " + path
	if schema != "" {
		return 0, where, errors.New("--schema applies to PostgreSQL only")
	}
	s, err := sqlite.Open(ctx, path, nil) // Open migrates
	if err != nil {
		return 0, where, err
	}
	if err := s.Close(); err != nil {
		return 0, where, err
	}
	return sqlite.SchemaVersion(), where, nil
}
