package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"unsafe"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

func init() {
	sqlite3.PatchIssue199() // what the driver package does at init; a no-op on most platforms
}

// A conn is one SQLite connection, driven through SQLite's C API as
// modernc.org/sqlite/lib transpiles it, not through a database/sql driver.
// The write path runs every statement of every batch one after the other
// on one goroutine, and a driver's work per statement (names looked up and
// memory allocated for each argument, a mutex taken for each call, column
// types asked for each result) cost a third of it. Here a connection is
// opened without SQLite's mutex (one goroutine uses it at a time: the
// writer, or a reader holding it from the pool), a statement's arguments
// are copied into a buffer the statement keeps, and prepared statements
// are kept for the connection's life.
type conn struct {
	tls   *libc.TLS
	db    uintptr
	stmts map[string]*stmt
}

// A stmt is a prepared statement.
type stmt struct {
	p    uintptr
	cols int
	args int
	busy bool    // its rows are being read
	buf  uintptr // C memory that text and blob arguments are copied into
	size int     // buf's size
}

// openConn opens the database at path and runs each pragma, given as
// "name(value)", in order.
func openConn(ctx context.Context, path string, pragmas ...string) (*conn, error) {
	c := &conn{tls: libc.NewTLS(), stmts: map[string]*stmt{}}
	name, err := libc.CString(path)
	if err != nil {
		c.tls.Close()
		return nil, err
	}
	defer libc.Xfree(c.tls, name)
	pdb := c.tls.Alloc(int(unsafe.Sizeof(uintptr(0))))
	defer c.tls.Free(int(unsafe.Sizeof(uintptr(0))))
	rc := sqlite3.Xsqlite3_open_v2(c.tls, name, pdb,
		sqlite3.SQLITE_OPEN_READWRITE|sqlite3.SQLITE_OPEN_CREATE|sqlite3.SQLITE_OPEN_NOMUTEX, 0)
	c.db = *(*uintptr)(cptr(pdb))
	if rc != sqlite3.SQLITE_OK {
		err := c.err(rc)
		c.close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	sqlite3.Xsqlite3_extended_result_codes(c.tls, c.db, 1)
	for _, p := range pragmas {
		if _, err := c.exec(ctx, "PRAGMA "+p); err != nil {
			c.close()
			return nil, fmt.Errorf("open %s: pragma %s: %w", path, p, err)
		}
	}
	// exec keeps what it prepares; pragmas are run once.
	for q, st := range c.stmts {
		c.finalize(st)
		delete(c.stmts, q)
	}
	return c, nil
}

func (c *conn) close() error {
	for _, st := range c.stmts {
		c.finalize(st)
	}
	c.stmts = nil
	var err error
	if c.db != 0 {
		if rc := sqlite3.Xsqlite3_close_v2(c.tls, c.db); rc != sqlite3.SQLITE_OK {
			err = c.err(rc)
		}
		c.db = 0
	}
	c.tls.Close()
	return err
}

func (c *conn) finalize(st *stmt) {
	sqlite3.Xsqlite3_finalize(c.tls, st.p)
	if st.buf != 0 {
		libc.Xfree(c.tls, st.buf)
	}
}

// An sqliteError is a failure SQLite reported: its extended result code
// and message.
type sqliteError struct {
	code int32
	msg  string
}

func (e *sqliteError) Error() string { return fmt.Sprintf("sqlite: %s (%d)", e.msg, e.code) }

// err returns the connection's error for result code rc.
func (c *conn) err(rc int32) error {
	if c.db == 0 {
		return &sqliteError{code: rc, msg: libc.GoString(sqlite3.Xsqlite3_errstr(c.tls, rc))}
	}
	return &sqliteError{code: rc, msg: libc.GoString(sqlite3.Xsqlite3_errmsg(c.tls, c.db))}
}

// prepare returns the prepared statement for query, preparing it once. A
// statement whose rows are being read is prepared afresh, kept apart, for
// the caller to finalize.
func (c *conn) prepare(query string) (*stmt, error) {
	if st, ok := c.stmts[query]; ok && !st.busy {
		return st, nil
	}
	q, err := libc.CString(query)
	if err != nil {
		return nil, err
	}
	defer libc.Xfree(c.tls, q)
	pst := c.tls.Alloc(int(unsafe.Sizeof(uintptr(0))))
	defer c.tls.Free(int(unsafe.Sizeof(uintptr(0))))
	if rc := sqlite3.Xsqlite3_prepare_v2(c.tls, c.db, q, -1, pst, 0); rc != sqlite3.SQLITE_OK {
		return nil, c.err(rc)
	}
	st := &stmt{p: *(*uintptr)(cptr(pst))}
	if st.p == 0 {
		return nil, errors.New("sqlite: no statement in query")
	}
	st.cols = int(sqlite3.Xsqlite3_column_count(c.tls, st.p))
	st.args = int(sqlite3.Xsqlite3_bind_parameter_count(c.tls, st.p))
	if _, ok := c.stmts[query]; !ok {
		c.stmts[query] = st
	}
	return st, nil
}

// release is done with a statement: reset for its next use, or finalized
// if it was prepared apart.
func (c *conn) release(query string, st *stmt) {
	st.busy = false
	if c.stmts[query] == st {
		sqlite3.Xsqlite3_reset(c.tls, st.p)
		return
	}
	c.finalize(st)
}

// bind binds args to st's parameters. Text and blobs are copied into the
// statement's buffer and bound without a copy of SQLite's own, which reads
// them as long as the statement runs: a statement binds all its parameters
// each time before it steps, and no other statement writes its buffer.
func (c *conn) bind(st *stmt, args []any) error {
	if len(args) != st.args {
		return fmt.Errorf("sqlite: %d arguments for %d parameters", len(args), st.args)
	}
	n := 1 // a non-NULL pointer even for empty text
	for i, a := range args {
		switch v := a.(type) {
		case string:
			n += len(v)
		case []byte:
			n += len(v)
		case json.RawMessage:
			n += len(v)
		case nil, int64, int, bool:
		default:
			return fmt.Errorf("sqlite: argument %d: unsupported type %T", i+1, a)
		}
	}
	if n > st.size {
		size := max(n, 2*st.size, 256)
		p := libc.Xmalloc(c.tls, libc.Tsize_t(size))
		if p == 0 {
			return fmt.Errorf("sqlite: cannot allocate %d bytes", size)
		}
		if st.buf != 0 {
			libc.Xfree(c.tls, st.buf)
		}
		st.buf, st.size = p, size
	}
	buf := unsafe.Slice((*byte)(cptr(st.buf)), st.size)
	off := 0
	for i, a := range args {
		idx := int32(i + 1)
		var rc int32
		switch v := a.(type) {
		case nil:
			rc = sqlite3.Xsqlite3_bind_null(c.tls, st.p, idx)
		case int64:
			rc = sqlite3.Xsqlite3_bind_int64(c.tls, st.p, idx, v)
		case int:
			rc = sqlite3.Xsqlite3_bind_int64(c.tls, st.p, idx, int64(v))
		case bool:
			var b int64
			if v {
				b = 1
			}
			rc = sqlite3.Xsqlite3_bind_int64(c.tls, st.p, idx, b)
		case string:
			copy(buf[off:], v)
			rc = sqlite3.Xsqlite3_bind_text(c.tls, st.p, idx, st.buf+uintptr(off), int32(len(v)), 0)
			off += len(v)
		case []byte, json.RawMessage:
			b := asBytes(v)
			if b == nil {
				rc = sqlite3.Xsqlite3_bind_null(c.tls, st.p, idx)
				break
			}
			copy(buf[off:], b)
			rc = sqlite3.Xsqlite3_bind_blob(c.tls, st.p, idx, st.buf+uintptr(off), int32(len(b)), 0)
			off += len(b)
		}
		if rc != sqlite3.SQLITE_OK {
			return c.err(rc)
		}
	}
	return nil
}

func asBytes(v any) []byte {
	if m, ok := v.(json.RawMessage); ok {
		if len(m) == 0 {
			return nil
		}
		return m
	}
	return v.([]byte)
}

// script runs statements that are not worth preparing: pragmas and
// migrations.
func (c *conn) script(ctx context.Context, query string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	q, err := libc.CString(query)
	if err != nil {
		return err
	}
	defer libc.Xfree(c.tls, q)
	if rc := sqlite3.Xsqlite3_exec(c.tls, c.db, q, 0, 0, 0); rc != sqlite3.SQLITE_OK {
		return c.err(rc)
	}
	return nil
}

// exec runs a statement to its end and returns how many rows it changed.
func (c *conn) exec(ctx context.Context, query string, args ...any) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	st, err := c.prepare(query)
	if err != nil {
		return 0, err
	}
	st.busy = true
	defer c.release(query, st)
	if err := c.bind(st, args); err != nil {
		return 0, err
	}
	for {
		switch rc := sqlite3.Xsqlite3_step(c.tls, st.p); rc {
		case sqlite3.SQLITE_ROW:
		case sqlite3.SQLITE_DONE:
			return sqlite3.Xsqlite3_changes64(c.tls, c.db), nil
		default:
			return 0, c.err(rc)
		}
	}
}

// insert runs an INSERT and returns the rowid of the row it inserted.
// RETURNING would say the same at about twice the statement's cost: SQLite
// buffers its rows in a table of their own.
func (c *conn) insert(ctx context.Context, query string, args ...any) (int64, error) {
	if _, err := c.exec(ctx, query, args...); err != nil {
		return 0, err
	}
	return sqlite3.Xsqlite3_last_insert_rowid(c.tls, c.db), nil
}

// query runs a statement that returns rows. The caller must close them. A
// read whose context ends is interrupted.
func (c *conn) query(ctx context.Context, query string, args ...any) (*rows, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	st, err := c.prepare(query)
	if err != nil {
		return nil, err
	}
	st.busy = true
	if err := c.bind(st, args); err != nil {
		c.release(query, st)
		return nil, err
	}
	r := &rows{c: c, st: st, query: query, ctx: ctx, vals: make([]any, st.cols)}
	if ctx.Done() != nil {
		db, fired := c.db, make(chan struct{})
		r.fired = fired
		r.stop = context.AfterFunc(ctx, func() {
			defer close(fired)
			tls := libc.NewTLS()
			defer tls.Close()
			sqlite3.Xsqlite3_interrupt(tls, db)
		})
	}
	return r, nil
}

// queryRow runs a statement for its first row; Scan reports
// sql.ErrNoRows when there is none.
func (c *conn) queryRow(ctx context.Context, query string, args ...any) *row {
	r, err := c.query(ctx, query, args...)
	return &row{rows: r, err: err}
}

// rows iterates over a statement's result, like sql.Rows.
type rows struct {
	c     *conn
	st    *stmt // nil once closed
	query string
	ctx   context.Context //nolint:containedctx // lives as long as the rows of one query: Next reports its cause when it interrupted the step
	vals  []any
	err   error
	stop  func() bool   // stops the interrupt of a read; nil if none
	fired chan struct{} // closed once the interrupt has run
}

func (r *rows) Next() bool {
	if r.err != nil || r.st == nil {
		return false
	}
	c, p := r.c, r.st.p
	switch rc := sqlite3.Xsqlite3_step(c.tls, p); rc {
	case sqlite3.SQLITE_ROW:
	case sqlite3.SQLITE_DONE:
		r.Close()
		return false
	default:
		r.err = c.err(rc)
		if err := r.ctx.Err(); err != nil {
			r.err = context.Cause(r.ctx)
		}
		r.Close()
		return false
	}
	for i := range r.vals {
		col := int32(i)
		switch sqlite3.Xsqlite3_column_type(c.tls, p, col) {
		case sqlite3.SQLITE_INTEGER:
			r.vals[i] = sqlite3.Xsqlite3_column_int64(c.tls, p, col)
		case sqlite3.SQLITE_FLOAT:
			r.vals[i] = sqlite3.Xsqlite3_column_double(c.tls, p, col)
		case sqlite3.SQLITE_TEXT:
			s := sqlite3.Xsqlite3_column_text(c.tls, p, col)
			r.vals[i] = string(cbytes(s, int(sqlite3.Xsqlite3_column_bytes(c.tls, p, col))))
		case sqlite3.SQLITE_BLOB:
			b := sqlite3.Xsqlite3_column_blob(c.tls, p, col)
			r.vals[i] = append([]byte{}, cbytes(b, int(sqlite3.Xsqlite3_column_bytes(c.tls, p, col)))...)
		default:
			r.vals[i] = nil
		}
	}
	return true
}

// Scan copies the current row's columns into dest, which may hold
// *string, *int64, *int, *[]byte and *sql.NullInt64.
func (r *rows) Scan(dest ...any) error {
	if len(dest) != len(r.vals) {
		return fmt.Errorf("sqlite: scan %d columns into %d values", len(r.vals), len(dest))
	}
	for i, v := range r.vals {
		if err := convert(dest[i], v); err != nil {
			return fmt.Errorf("sqlite: column %d: %w", i, err)
		}
	}
	return nil
}

func (r *rows) Err() error { return r.err }

func (r *rows) Close() error {
	if r.st == nil {
		return nil
	}
	r.c.release(r.query, r.st)
	r.st = nil
	// An interrupt under way must land before the connection serves its
	// next statement, which it would interrupt instead.
	if r.stop != nil && !r.stop() {
		<-r.fired
	}
	return nil
}

// cptr converts C memory's address, which the garbage collector does not
// manage, to a pointer.
func cptr(p uintptr) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&p))
}

// cbytes views n bytes of C memory at p; nil for none.
func cbytes(p uintptr, n int) []byte {
	if p == 0 || n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(cptr(p)), n)
}

func convert(dest any, v any) error {
	switch d := dest.(type) {
	case *string:
		if s, ok := v.(string); ok {
			*d = s
			return nil
		}
	case *int64:
		if n, ok := v.(int64); ok {
			*d = n
			return nil
		}
	case *int:
		if n, ok := v.(int64); ok {
			*d = int(n)
			return nil
		}
	case *[]byte:
		switch b := v.(type) {
		case nil:
			*d = nil
			return nil
		case []byte:
			*d = b
			return nil
		case string:
			*d = []byte(b)
			return nil
		}
	case *sql.NullInt64:
		switch n := v.(type) {
		case nil:
			*d = sql.NullInt64{}
			return nil
		case int64:
			*d = sql.NullInt64{Int64: n, Valid: true}
			return nil
		}
	}
	return fmt.Errorf("cannot store %T in %T", v, dest)
}

// row is the first row of a result, like sql.Row.
type row struct {
	rows *rows
	err  error
}

func (r *row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	return r.rows.Scan(dest...)
}
