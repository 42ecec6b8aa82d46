package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func testConn(t *testing.T) *conn {
	t.Helper()
	c, err := openConn(t.Context(), filepath.Join(t.TempDir(), "c.db"), "journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.close() })
	return c
}

// Values come back as they went in: empty text is not NULL, a nil blob is,
// and arguments larger than the connection's buffer grow it.
func TestConnValues(t *testing.T) {
	t.Parallel()
	c := testConn(t)
	ctx := t.Context()
	if err := c.script(ctx, `CREATE TABLE v (i INTEGER, s TEXT, b BLOB)`); err != nil {
		t.Fatal(err)
	}
	big := []byte(strings.Repeat("x", 10000))
	for _, args := range [][]any{
		{int64(-7), "", []byte{}},
		{42, "héllo", nil},
		{true, strings.Repeat("y", 5000), big},
	} {
		if _, err := c.exec(ctx, `INSERT INTO v VALUES (?, ?, ?)`, args...); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := c.query(ctx, `SELECT i, s, b, s IS NULL, b IS NULL FROM v ORDER BY rowid`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type value struct {
		i            int64
		s            string
		b            []byte
		sNull, bNull int
	}
	var got []value
	for rows.Next() {
		var v value
		if err := rows.Scan(&v.i, &v.s, &v.b, &v.sNull, &v.bNull); err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("got %d rows, want 3", len(got))
	}
	if g := got[0]; g.i != -7 || g.s != "" || g.sNull != 0 || g.bNull != 0 {
		t.Errorf("row 1 = %+v, want -7, empty text, empty blob", g)
	}
	if g := got[1]; g.i != 42 || g.s != "héllo" || g.bNull != 1 {
		t.Errorf("row 2 = %+v, want 42, héllo, NULL", g)
	}
	if g := got[2]; g.i != 1 || len(g.s) != 5000 || string(g.b) != string(big) {
		t.Errorf("row 3: i %d, %d bytes of text, %d of blob; want 1, 5000, 10000", g.i, len(g.s), len(g.b))
	}
	if _, err := c.exec(ctx, `INSERT INTO v VALUES (?, ?, ?)`, 1, 2); err == nil {
		t.Error("2 arguments for 3 parameters: no error")
	}
	if _, err := c.exec(ctx, `INSERT INTO v VALUES (?, ?, ?)`, 1, 2.5, 3); err == nil {
		t.Error("a float argument: no error")
	}
}

// A statement run again while its rows are still being read runs as a
// statement of its own.
func TestConnNestedStatement(t *testing.T) {
	t.Parallel()
	c := testConn(t)
	ctx := t.Context()
	if err := c.script(ctx, `CREATE TABLE n (i INTEGER); INSERT INTO n VALUES (1), (2), (3)`); err != nil {
		t.Fatal(err)
	}
	const q = `SELECT i FROM n WHERE i >= ? ORDER BY i`
	outer, err := c.query(ctx, q, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Close()
	var sums []int
	for outer.Next() {
		var i int
		if err := outer.Scan(&i); err != nil {
			t.Fatal(err)
		}
		var first int
		if err := c.queryRow(ctx, q, i+1).Scan(&first); err != nil && !errors.Is(err, sql.ErrNoRows) {
			t.Fatal(err)
		}
		sums = append(sums, i+first)
	}
	if err := outer.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []int{3, 5, 3}; len(sums) != 3 || sums[0] != want[0] || sums[1] != want[1] || sums[2] != want[2] {
		t.Errorf("sums %v, want %v", sums, want)
	}
}

// A statement's text arguments hold while it runs, whatever other
// statements bind meanwhile: SQLite reads them at every row.
func TestConnArgumentsOutliveOtherStatements(t *testing.T) {
	t.Parallel()
	c := testConn(t)
	ctx := t.Context()
	if err := c.script(ctx, `CREATE TABLE w (s TEXT); INSERT INTO w VALUES ('apple'), ('banana'), ('cherry'), ('date')`); err != nil {
		t.Fatal(err)
	}
	rows, err := c.query(ctx, `SELECT s FROM w WHERE s >= ? ORDER BY rowid`, "b")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
		var n int
		if err := c.queryRow(ctx, `SELECT count(*) FROM w WHERE s >= ?`, strings.Repeat("z", 300)).Scan(&n); err != nil || n != 0 {
			t.Fatalf("inner count = %d, %v; want 0", n, err)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := "banana cherry date"; strings.Join(got, " ") != want {
		t.Errorf("rows %q, want %q", got, want)
	}
}

// A read whose context ends is interrupted with the context's error, and
// the connection serves the next statement.
func TestConnInterrupt(t *testing.T) {
	t.Parallel()
	c := testConn(t)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	endless := `WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT max(i) FROM r`
	var n int64
	err := c.queryRow(ctx, endless).Scan(&n)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("endless read: %v, want the context's deadline", err)
	}
	if err := c.queryRow(t.Context(), `SELECT 7`).Scan(&n); err != nil || n != 7 {
		t.Fatalf("next read: %d, %v; want 7", n, err)
	}
}
