// Package sqlite is reprise's embedded Store: one SQLite database file
// (or ":memory:"), on the pure-Go modernc.org/sqlite (its C API, see conn.go).
//
// Writes go through one connection and are group-committed: calls that
// arrive together share one transaction and one fsync, and each caller
// gets its own result. Reads use a separate pool of read-only connections, which WAL mode
// lets run beside the writer. See docs/storage.md for the schema and the
// reasons behind the pragmas.
package sqlite

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"time"

	"reprise/store"
)

var _ store.Store = (*Store)(nil)

// Options configures a Store. The zero value works.
type Options struct {
	// Now is the store's clock: it stamps events and computes ready, lease
	// and fire times.
	// Default: time.Now.
	Now func() time.Time
	// Logger receives the store's rare notes (a migration applied).
	// Default: nil, silent.
	Logger *slog.Logger
	// Synchronous is SQLite's synchronous pragma. "NORMAL" (in WAL mode)
	// keeps every commit durable against a crash of the process, kill -9
	// included, which is what reprise promises (a committed step outcome survives a crash), but may lose the last
	// commits on power loss or a kernel crash. "FULL" adds durability
	// against those at the cost of one fsync per group commit (see
	// docs/storage.md for the difference measured). "OFF" is for tests.
	// Default: "NORMAL".
	Synchronous string
	// BusyTimeout is how long a connection waits for a lock another
	// process holds before failing with SQLITE_BUSY.
	// Default: 5s.
	BusyTimeout time.Duration
	// ReadConns caps the pool of read-only connections.
	// Default: the number of CPUs, at least 2.
	ReadConns int
	// Exclusive makes Open take an advisory lock, on the file PATH.lock
	// beside the database, that no other process can take until Close:
	// another process's Open with Exclusive fails with ErrLocked. Two
	// processes running engines on one file are not safe, so a process
	// that runs an engine sets it (reprise server does); a process that
	// only reads beside it leaves it unset. Stores of one process share
	// the lock. The kernel releases it when the process ends, however it
	// ends. Taken on Linux, macOS, the BSDs and Windows; ignored for
	// ":memory:". Default: false.
	Exclusive bool
}

// Store is a reprise.Store on SQLite.
type Store struct {
	path   string
	now    func() time.Time
	logger *slog.Logger

	commit  *committer    // runs every write on the one write connection
	readers *pool         // nil for ":memory:": reads then go through commit
	ckpt    *checkpointer // nil for ":memory:"
	lock    *fileLock     // nil unless Options.Exclusive

	closeOnce sync.Once
	closeErr  error
}

// Open opens the database at path, creating it if needed, and migrates it
// to this version's schema (see Migrate). A path of ":memory:" opens a
// private in-memory database, for tests: its one connection serves reads
// and writes.
//
// A database migrated by a newer reprise gives an error wrapping
// reprise.ErrSchemaTooNew. ctx bounds the opening and the migration; the
// store, once open, lives until Close.
func Open(ctx context.Context, path string, opts *Options) (*Store, error) {
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
	if o.Exclusive && path != ":memory:" {
		if s.lock, err = lockExclusive(path); err != nil {
			return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
		}
	}
	if err := s.open(ctx, o); err != nil {
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
		o.Synchronous = "NORMAL"
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
		errs = append(errs, fmt.Errorf("option Synchronous %q: want OFF, NORMAL, FULL or EXTRA", o.Synchronous))
	}
	if o.BusyTimeout < 0 {
		errs = append(errs, fmt.Errorf("option BusyTimeout %v: negative", o.BusyTimeout))
	}
	if o.ReadConns < 0 {
		errs = append(errs, fmt.Errorf("option ReadConns %d: negative", o.ReadConns))
	}
	return o, errors.Join(errs...)
}

func (s *Store) open(ctx context.Context, o Options) error {
	memory := s.path == ":memory:"
	busy := fmt.Sprintf("busy_timeout(%d)", o.BusyTimeout.Milliseconds())
	pragmas := []string{
		busy,
		"synchronous(" + strings.ToUpper(o.Synchronous) + ")",
		"temp_store(MEMORY)",
		"cache_size(-32000)", // 32 MB of page cache
		// The checkpointer keeps the WAL short off the write path; the
		// automatic checkpoint, inside a commit, is only a backstop.
		"wal_autocheckpoint(10000)",
	}
	if !memory {
		pragmas = append(pragmas, "journal_mode(WAL)")
	}
	w, err := openConn(ctx, s.path, pragmas...)
	if err != nil {
		return err
	}
	s.commit = newCommitter(w, s.now)
	if !memory {
		// Readers need no journal mode (WAL is a property of the file,
		// set by the writer) and must never write.
		s.readers = newPool(o.ReadConns, s.path, busy, "cache_size(-8000)", "query_only(1)")
	}
	if err := s.migrate(ctx); err != nil {
		return err
	}
	if !memory {
		if s.ckpt, err = startCheckpointer(context.WithoutCancel(ctx), s.path, busy, 250*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// Close waits for the writes under way, then closes the database. Calls
// after Close fail, but Close itself, which returns what the first
// returned; reads must not be under way.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Store) close() error {
	s.forget("") // its engines die with it
	var errs []error
	if s.ckpt != nil {
		errs = append(errs, s.ckpt.close())
	}
	if s.commit != nil {
		s.commit.close()
		errs = append(errs, s.commit.conn.close())
	}
	if s.readers != nil {
		errs = append(errs, s.readers.close())
	}
	if s.lock != nil {
		errs = append(errs, s.lock.release())
		s.lock = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close sqlite store: %w", err)
	}
	return nil
}

// write runs fn in a group-committed write transaction.
func (s *Store) write(ctx context.Context, fn func(tx *txn) error) error {
	return s.commit.do(ctx, fn)
}

// read runs fn in a read transaction, a snapshot of the database taken at
// its first statement, with the store's time.
func (s *Store) read(ctx context.Context, fn func(tx *txn) error) error {
	if s.readers == nil {
		return s.commit.do(ctx, fn)
	}
	c, err := s.readers.get(ctx)
	if err != nil {
		return err
	}
	now := s.now().UTC()
	tx := &txn{c: c, ctx: ctx, now: now, nanos: now.UnixNano()}
	if err := tx.begin("DEFERRED"); err != nil {
		s.readers.discard(c)
		return err
	}
	err = fn(tx)
	if _, rerr := c.exec(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
		// A connection stuck in a transaction is of no further use.
		s.readers.discard(c)
		return errors.Join(err, rerr)
	}
	s.readers.put(c)
	return err
}

// A pool holds the read-only connections, opened as they are needed.
type pool struct {
	path    string
	pragmas []string
	idle    chan *conn
	slots   chan struct{} // one per open connection
}

func newPool(size int, path string, pragmas ...string) *pool {
	return &pool{path: path, pragmas: pragmas, idle: make(chan *conn, size), slots: make(chan struct{}, size)}
}

func (p *pool) get(ctx context.Context) (*conn, error) {
	select {
	case c := <-p.idle:
		return c, nil
	default:
	}
	select {
	case c := <-p.idle:
		return c, nil
	case p.slots <- struct{}{}:
		c, err := openConn(ctx, p.path, p.pragmas...)
		if err != nil {
			<-p.slots
			return nil, err
		}
		return c, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

func (p *pool) put(c *conn) { p.idle <- c }

// discard closes a connection that is not to be reused.
func (p *pool) discard(c *conn) {
	_ = c.close()
	<-p.slots
}

// close closes the idle connections: all of them, when no read is under
// way.
func (p *pool) close() error {
	var errs []error
	for {
		select {
		case c := <-p.idle:
			errs = append(errs, c.close())
			<-p.slots
		default:
			return errors.Join(errs...)
		}
	}
}
