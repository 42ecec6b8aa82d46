// Package sqlite is reprise's embedded Store: one SQLite database file
// (or ":memory:"), on the pure-Go modernc.org/sqlite driver.
//
// Writes go through one connection and are group-committed: calls that
// arrive together share one transaction and one fsync, each in its own
// result. Reads use a separate pool of read-only connections, which WAL mode
// lets run beside the writer. See docs/storage.md for the schema and the
// reasons behind the pragmas.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"reprise"
)

var _ reprise.Store = (*Store)(nil)

// Options configures a Store. The zero value works.
type Options struct {
	// Now is the store's clock: it stamps events and computes ready, lease
	// and fire times.
	// Default: time.Now.
	Now func() time.Time
	// Logger receives the store's rare notes (a migration applied).
	// Default: nil, silent.
	Logger *slog.Logger
	// Synchronous is SQLite's synchronous pragma: "FULL" makes every commit
	// durable against power loss; "NORMAL" keeps commits durable against a
	// crash of the process (kill -9) but may lose the last ones on power
	// loss, for fewer fsyncs. "OFF" is for tests only.
	// Default: "FULL".
	Synchronous string
	// BusyTimeout is how long a connection waits for a lock another
	// process holds before failing with SQLITE_BUSY.
	// Default: 5s.
	BusyTimeout time.Duration
	// ReadConns caps the pool of read-only connections.
	// Default: the number of CPUs, at least 2.
	ReadConns int
}

// Store is a reprise.Store on SQLite.
type Store struct {
	path   string
	now    func() time.Time
	logger *slog.Logger

	writeDB *sql.DB // one connection, held by commit
	commit  *committer
	readDB  *sql.DB // nil for ":memory:": reads then go through commit
}

// Open opens the database at path, creating it if needed, and migrates it
// to this version's schema (see Migrate). A path of ":memory:" opens a
// private in-memory database, for tests.
//
// A database migrated by a newer reprise gives an error wrapping
// reprise.ErrSchemaTooNew.
func Open(path string, opts *Options) (*Store, error) {
	if opts == nil {
		opts = &Options{}
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	s := &Store{path: path, now: o.Now, logger: o.Logger}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if err := s.open(o); err != nil {
		s.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	return s, nil
}

func (o Options) withDefaults() (Options, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Synchronous == "" {
		o.Synchronous = "FULL"
	}
	if o.BusyTimeout == 0 {
		o.BusyTimeout = 5 * time.Second
	}
	if o.ReadConns == 0 {
		o.ReadConns = max(runtime.NumCPU(), 2)
	}
	var errs []error
	switch strings.ToUpper(o.Synchronous) {
	case "OFF", "NORMAL", "FULL", "EXTRA":
	default:
		errs = append(errs, fmt.Errorf("Synchronous %q: want OFF, NORMAL, FULL or EXTRA", o.Synchronous))
	}
	if o.BusyTimeout < 0 {
		errs = append(errs, fmt.Errorf("BusyTimeout %v: negative", o.BusyTimeout))
	}
	if o.ReadConns < 0 {
		errs = append(errs, fmt.Errorf("ReadConns %d: negative", o.ReadConns))
	}
	return o, errors.Join(errs...)
}

func (s *Store) open(o Options) error {
	memory := s.path == ":memory:"
	busy := fmt.Sprintf("busy_timeout(%d)", o.BusyTimeout.Milliseconds())
	pragmas := []string{
		busy,
		"synchronous(" + strings.ToUpper(o.Synchronous) + ")",
		"temp_store(MEMORY)",
		"cache_size(-16000)", // 16 MB of page cache per connection
	}
	if !memory {
		pragmas = append(pragmas, "journal_mode(WAL)")
	}

	var err error
	s.writeDB, err = sql.Open("sqlite", dsn(s.path, pragmas))
	if err != nil {
		return err
	}
	s.writeDB.SetMaxOpenConns(1)
	s.writeDB.SetMaxIdleConns(1)
	s.writeDB.SetConnMaxLifetime(0)
	s.writeDB.SetConnMaxIdleTime(0)
	// Open is a constructor without a context: the connection is set up
	// once, with the background context the driver uses itself.
	conn, err := s.writeDB.Conn(context.Background())
	if err != nil {
		return err
	}
	s.commit = newCommitter(conn, s.now)

	if !memory {
		s.readDB, err = sql.Open("sqlite", dsn(s.path, []string{busy, "cache_size(-16000)", "query_only(1)"}))
		if err != nil {
			return err
		}
		s.readDB.SetMaxOpenConns(o.ReadConns)
		s.readDB.SetMaxIdleConns(o.ReadConns)
	}
	return s.migrate(context.Background())
}

// dsn builds the driver's data source name. The path goes to SQLite as it
// is, so it must not hold a '?'.
func dsn(path string, pragmas []string) string {
	var b strings.Builder
	b.WriteString(path)
	for i, p := range pragmas {
		if i == 0 {
			b.WriteByte('?')
		} else {
			b.WriteByte('&')
		}
		b.WriteString("_pragma=")
		b.WriteString(p)
	}
	return b.String()
}

// Close waits for the writes under way, then closes the database. Calls
// after Close fail.
func (s *Store) Close() error {
	var errs []error
	if s.commit != nil {
		s.commit.close()
		errs = append(errs, s.commit.conn.Close())
	}
	if s.writeDB != nil {
		errs = append(errs, s.writeDB.Close())
	}
	if s.readDB != nil {
		errs = append(errs, s.readDB.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close sqlite store: %w", err)
	}
	return nil
}

// A querier runs statements: a read transaction, or the write transaction
// of a batch.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// write runs fn in a group-committed write transaction.
func (s *Store) write(ctx context.Context, fn func(tx *wtx) error) error {
	return s.commit.do(ctx, fn)
}

// read runs fn in a read transaction, a snapshot of the database, and gives
// it the store's time.
func (s *Store) read(ctx context.Context, fn func(q querier, now time.Time) error) error {
	if s.readDB == nil {
		return s.commit.do(ctx, func(tx *wtx) error { return fn(tx, s.now().UTC()) })
	}
	tx, err := s.readDB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	return fn(tx, s.now().UTC())
}
