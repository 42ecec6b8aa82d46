// Package postgres is reprise's Store on PostgreSQL, for several engine
// processes that share one database and split the work between them.
//
// Claims take rows with FOR UPDATE SKIP LOCKED, so that no task or run is
// leased to two claimers at once; all lease, ready and event times come from
// the database's clock, so that engines whose clocks disagree still agree on
// when a lease lapses; and LISTEN/NOTIFY tells other processes when work
// becomes ready (see Store.Listen). docs/postgres.md describes the tables.
package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"reprise/postgres/internal/pgtx"
	"reprise/store"
)

var _ store.Store = (*Store)(nil)

// Options configures a Store. The zero value works.
type Options struct {
	// Schema is the PostgreSQL schema that holds reprise's tables; Open
	// creates it if needed. Several reprise deployments can share a database
	// in different schemas. Default: "public".
	Schema string
	// Now, when set, replaces the database clock: every lease, ready and
	// event time is computed from it. Tests set it to a fake clock. Default:
	// nil, the database's statement_timestamp(), so that processes with
	// skewed clocks agree.
	Now func() time.Time
	// Logger receives the store's few log lines (migrations applied, the
	// notice listener losing its connection). Default: nil, silent.
	Logger *slog.Logger
	// MaxConns caps the connection pool. Default: 0, pgxpool's default (the
	// greater of 4 and the number of CPUs), or pool_max_conns in the DSN.
	MaxConns int32
	// Writers is how many transactions at once record the store's
	// transitions; the transitions that arrive while they are busy wait,
	// and then share one transaction (group commit). Unused with Plain.
	// Default: 2.
	Writers int
	// Plain runs every Store call in a transaction of its own, one
	// statement at a time: BEGIN, its reads and writes in the order it
	// makes them, COMMIT. Nothing is shared with other calls (no group
	// commit, no reads sent ahead, no statements merged across
	// transitions, no history reads served together), and arguments go to
	// pgx's codecs as they are. It is the reference the default, grouped
	// path is checked against (the conformance suite runs on both), and a
	// way to debug it: each statement runs and fails on its own, and the
	// server's log reads one call at a time. Every call then pays its own
	// commit and a round trip per statement: it is for tests and
	// debugging, not for load. Default: false, grouped (docs/postgres.md).
	Plain bool
	// NoMigrate stops Open from applying migrations; it still refuses a
	// database whose schema is newer or older than this binary's. Default:
	// false, Open migrates.
	NoMigrate bool
}

// A Store is reprise's durable state in PostgreSQL. It is safe for
// concurrent use, also by several processes on one database.
type Store struct {
	pool    *pgxpool.Pool
	schema  string
	channel string
	now     func() time.Time
	log     *slog.Logger

	committer *pgtx.Committer
	notifier  notifier
	reads     *pgtx.Batcher[*historyRead] // HistoryList calls read together; nil: each alone (Plain)

	// engines holds the connections that hold the locks of the engines
	// started on this store (engine.go).
	enginesMu sync.Mutex
	engines   map[string]*pgx.Conn
}

// Open connects to the database at dsn (a postgres:// URL or a key=value
// string), migrates the schema unless opts.NoMigrate, and returns the store.
// opts may be nil.
func Open(ctx context.Context, dsn string, opts *Options) (*Store, error) {
	cfg, o, err := poolConfig(dsn, opts)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	s := &Store{
		pool:    pool,
		schema:  o.Schema,
		channel: channelName(o.Schema),
		now:     o.Now,
		log:     o.Logger,
		engines: make(map[string]*pgx.Conn),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.committer = pgtx.New(pool, pgtx.Options{Writers: o.Writers, Plain: o.Plain, Publish: s.publish, Logger: s.log})
	if !o.Plain {
		s.reads = pgtx.NewBatcher[*historyRead](maxReaders, maxReads)
	}
	if o.NoMigrate {
		err = checkVersion(ctx, pool, o.Schema)
	} else {
		err = migrate(ctx, pool, o.Schema, s.log)
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// poolConfig validates opts, fills their defaults and builds the pool's
// configuration: every connection uses the store's schema and UTC.
func poolConfig(dsn string, opts *Options) (*pgxpool.Config, Options, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Schema == "" {
		o.Schema = "public"
	}
	var errs []error
	if len(o.Schema) > 63 {
		errs = append(errs, fmt.Errorf("schema %q: longer than 63 bytes", o.Schema))
	}
	if o.MaxConns < 0 {
		errs = append(errs, fmt.Errorf("max conns %d: negative", o.MaxConns))
	}
	if o.Writers < 0 {
		errs = append(errs, fmt.Errorf("writers %d: negative", o.Writers))
	}
	o.Writers = cmp.Or(o.Writers, 2)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		errs = append(errs, fmt.Errorf("parse dsn: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, o, fmt.Errorf("open postgres: %w", err)
	}
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	// Every connection of the grouped path writes its arrays itself.
	if !o.Plain {
		cfg.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
			pgtx.RegisterArrays(conn.TypeMap())
			return nil
		}
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{o.Schema}.Sanitize()
	cfg.ConnConfig.RuntimeParams["timezone"] = "UTC"
	// Every statement is prepared once per connection and its parameters
	// never change which index serves it, so a generic plan is always
	// right; the default would plan the claims afresh on each call.
	if _, ok := cfg.ConnConfig.RuntimeParams["plan_cache_mode"]; !ok {
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	}
	// Every statement reads and writes rows by key or through an index
	// made for it. A generic plan made while a table is small (a new
	// schema) would scan it instead, for the connection's life, as soon as
	// a statement joins the table with an array of keys, which the writes
	// that serve several transitions at once do (package pgtx).
	if _, ok := cfg.ConnConfig.RuntimeParams["enable_seqscan"]; !ok {
		cfg.ConnConfig.RuntimeParams["enable_seqscan"] = "off"
	}
	// Nor is a bitmap scan: it reads every row the index holds before it
	// sorts them. RunClaim's generic plan, made on a new schema, read and
	// sorted the whole backlog of unowned runs (on disk, past work_mem) to
	// claim the oldest few: 55 ms a claim with 60,000 runs waiting, where
	// the index, read in order, stops at the limit.
	if _, ok := cfg.ConnConfig.RuntimeParams["enable_bitmapscan"]; !ok {
		cfg.ConnConfig.RuntimeParams["enable_bitmapscan"] = "off"
	}
	return cfg, o, nil
}

// Close sends the notices still queued and closes the store's connections.
// Its engines die with it: their locks are let go.
func (s *Store) Close() error {
	s.notifier.wg.Wait()
	ctx := context.Background() //nolint:forbidigo // Close takes no ctx (io.Closer), and the unlocks must run as the store goes
	var errs []error
	s.enginesMu.Lock()
	for id, conn := range s.engines {
		errs = append(errs, s.unlockEngine(ctx, id, conn))
		delete(s.engines, id)
	}
	s.enginesMu.Unlock()
	s.pool.Close()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close postgres store: %w", err)
	}
	return nil
}

// clock returns the time to use instead of the database's, or nil to use
// the database's: every query takes it as $1 and reads
// coalesce($1::timestamptz, statement_timestamp()). The statement's time,
// not the transaction's (now()): transitions that share a transaction
// (group commit) each read their own time.
func (s *Store) clock() any {
	if s.now == nil {
		return nil
	}
	return s.now().Truncate(time.Microsecond).UTC()
}

// advisoryKey turns a name into a key for pg_advisory_xact_lock.
func advisoryKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

// utc returns t in UTC, or the zero time for a NULL.
func utc(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// nullJSON returns b for a json column: NULL when empty.
func nullJSON(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

// encodeError returns e for the error column: NULL when nil.
func encodeError(e *store.ErrorInfo) (any, error) {
	if e == nil {
		return nil, nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode error: %w", err)
	}
	return string(b), nil
}
