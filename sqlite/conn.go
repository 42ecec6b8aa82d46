package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	sqlitedriver "modernc.org/sqlite"
)

// A conn is one SQLite connection, used through the driver directly rather
// than through database/sql: the store owns its few connections and needs
// no pool, and on the write path, which runs every call of every batch one
// after the other, database/sql's work per statement would cost as much as
// SQLite's own. Prepared statements are kept for the connection's life.
type conn struct {
	dc    driver.Conn
	stmts map[string]driver.Stmt
	args  []driver.NamedValue // reused: the driver copies what it binds
}

func openConn(name string) (*conn, error) {
	dc, err := (&sqlitedriver.Driver{}).Open(name)
	if err != nil {
		return nil, err
	}
	return &conn{dc: dc, stmts: map[string]driver.Stmt{}}, nil
}

func (c *conn) close() error {
	var errs []error
	for _, st := range c.stmts {
		errs = append(errs, st.Close())
	}
	errs = append(errs, c.dc.Close())
	return errors.Join(errs...)
}

// stmt returns the prepared statement for query, preparing it once.
func (c *conn) stmt(ctx context.Context, query string) (driver.Stmt, error) {
	if st, ok := c.stmts[query]; ok {
		return st, nil
	}
	st, err := c.dc.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	c.stmts[query] = st
	return st, nil
}

// script runs statements that are not worth preparing: transaction
// control, pragmas, migrations.
func (c *conn) script(ctx context.Context, query string) error {
	_, err := c.dc.(driver.ExecerContext).ExecContext(ctx, query, nil)
	return err
}

// exec runs a statement and returns how many rows it changed.
func (c *conn) exec(ctx context.Context, query string, args ...any) (int64, error) {
	st, err := c.stmt(ctx, query)
	if err != nil {
		return 0, err
	}
	nv, err := c.namedValues(args)
	if err != nil {
		return 0, err
	}
	res, err := st.(driver.StmtExecContext).ExecContext(ctx, nv)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// query runs a statement that returns rows. The caller must close them.
func (c *conn) query(ctx context.Context, query string, args ...any) (*rows, error) {
	st, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	nv, err := c.namedValues(args)
	if err != nil {
		return nil, err
	}
	r, err := st.(driver.StmtQueryContext).QueryContext(ctx, nv)
	if err != nil {
		return nil, err
	}
	return &rows{r: r, vals: make([]driver.Value, len(r.Columns()))}, nil
}

// queryRow runs a statement for its first row; Scan reports
// sql.ErrNoRows when there is none.
func (c *conn) queryRow(ctx context.Context, query string, args ...any) *row {
	r, err := c.query(ctx, query, args...)
	return &row{rows: r, err: err}
}

func (c *conn) namedValues(args []any) ([]driver.NamedValue, error) {
	nv := slices.Grow(c.args[:0], len(args))[:len(args)]
	c.args = nv
	for i, a := range args {
		nv[i] = driver.NamedValue{Ordinal: i + 1}
		switch v := a.(type) {
		case nil, int64, string, []byte:
			nv[i].Value = v
		case int:
			nv[i].Value = int64(v)
		case bool:
			nv[i].Value = int64(0)
			if v {
				nv[i].Value = int64(1)
			}
		case json.RawMessage:
			if len(v) > 0 {
				nv[i].Value = []byte(v)
			}
		default:
			return nil, fmt.Errorf("sqlite: argument %d: unsupported type %T", i+1, a)
		}
	}
	return nv, nil
}

// rows iterates over a statement's result, like sql.Rows.
type rows struct {
	r    driver.Rows
	vals []driver.Value
	err  error
}

func (r *rows) Next() bool {
	if r.err != nil {
		return false
	}
	err := r.r.Next(r.vals)
	if err != nil {
		if err != io.EOF {
			r.err = err
		}
		return false
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

func (r *rows) Close() error { return r.r.Close() }

func convert(dest any, v driver.Value) error {
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
