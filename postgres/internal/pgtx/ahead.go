package pgtx

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Reading ahead. In a group, each transition's first read waited for the
// one before it to be decided: a group of n transitions was n+1 round trips
// on a connection held all along, and the writers were busy mostly waiting
// for them. A transition that knows its first read before it runs (a lock
// of its run, or of its task and run) declares it; the group sends all the
// declared reads in its first round trip, with BEGIN, and each transition
// then finds its read's rows waiting. Transitions that only read ahead and
// write cost the group two round trips in all.
//
// The reads ahead lock with SKIP LOCKED, so that a group never waits while
// it takes the locks of all its transitions at once (two groups, or a group
// and RunRenew or RunRelease, would then deadlock more often than one at a
// time). A read ahead that finds nothing, or not all it locks (a run's
// parent), may have met a row another transaction holds: the transition
// reads again, in turn, and waits as it always did (ErrStale).
//
// A read sent ahead ran before the writes of the transitions that come
// before it in the group. Each such transition records the runs it locks
// (Tx.Own), and a transition whose read ahead locked a run that one of
// them holds runs again, reading after their writes (ErrStale). A
// transition that records nothing (Committer.Run, not RunOwning) may have
// written anywhere: the reads ahead of those after it are not used.

// ErrStale reports that a transition read ahead a run that a transition
// before it in its group holds (Tx.Own), or that its read ahead found
// nothing (Tx.Ahead): what it read may predate the others' writes, or miss
// a row another transaction holds. The group runs the transition again,
// reading in turn.
var ErrStale = errors.New("read ahead of a transition that holds the same run")

// A Read is a read that a transition declares to its group, to be sent
// ahead (Committer.RunOwning): its text, its arguments, and their SQL
// types, for the statement that reads the same for several transitions at
// once. The transition then reads it as its first reads, in order, with
// Tx.Query or Tx.QueryRow of the same text.
type Read struct {
	SQL   string
	Args  []any
	Types []string // of Args: "bigint", "text", "timestamptz", "interval", …

	// Set, if not empty, is the statement that reads (or writes) the same
	// for several transitions, with their arguments as arrays of Types,
	// returning with each row the number of its transition, from 1. By
	// default it is SQL, with SKIP LOCKED, run for each transition's
	// arguments in a lateral subquery (see merged). Writes says that it
	// writes: a group that does not record the transition as it read must
	// not commit, and the transition then runs alone.
	Set    string
	Writes bool
}

// A twoArgs is a read ahead with up to two arguments, allocated with them:
// the reads of a transition are made for every transition, and their
// slices were a share of a group's allocations.
type twoArgs struct {
	read Read
	args [2]any
}

// NewRead returns a read of sql with the arguments args (at most two) of
// the SQL types types, which the caller keeps unchanged.
func NewRead(sql string, types []string, args ...any) *Read {
	r := &twoArgs{}
	n := copy(r.args[:], args)
	r.read = Read{SQL: sql, Args: r.args[:n:n], Types: types}
	return &r.read
}

// writesAhead reports whether any of reads writes.
func writesAhead(reads []*Read) bool {
	return slices.ContainsFunc(reads, func(r *Read) bool { return r.Writes })
}

// readAhead sends BEGIN and what else is queued, with the reads that the
// group's calls declared (those whose context is alive), and returns each
// read's rows, copied, by call and read.
//
// The reads of the same text go in one statement (merged), whatever their
// number: each statement costs the server more to start than these
// lookups by key cost to run.
func (c *conversation) readAhead(group []*call) ([][]*aheadRows, error) {
	type ref struct{ call, read int }
	var (
		texts []string             // in the order first declared
		refs  = map[string][]ref{} // by text
	)
	for i, cl := range group {
		if cl.ctx.Err() != nil {
			continue
		}
		for j, r := range cl.first {
			if refs[r.SQL] == nil {
				texts = append(texts, r.SQL)
			}
			refs[r.SQL] = append(refs[r.SQL], ref{i, j})
		}
	}
	if len(texts) == 0 {
		return nil, nil
	}
	b := &pgx.Batch{QueuedQueries: c.flush()}
	n := len(b.QueuedQueries)
	for _, text := range texts {
		rs := refs[text]
		first := group[rs[0].call].first[rs[0].read]
		if len(rs) == 1 {
			b.Queue(skipLocked(text), first.Args...)
			continue
		}
		args := make([]any, len(first.Types))
		for k := range args {
			col := make([]any, len(rs))
			for m, r := range rs {
				col[m] = group[r.call].first[r.read].Args[k]
			}
			args[k] = typed(first.Types[k], col)
		}
		set := first.Set
		if set == "" {
			set = merged(text, first.Types)
		}
		b.Queue(set, args...)
		c.count(1)
	}
	br := c.conn.SendBatch(c.ctx, b)
	for _, qq := range b.QueuedQueries[:n] {
		if err := result(br, qq); err != nil {
			br.Close()
			return nil, fmt.Errorf("queued statements: %w", err)
		}
	}
	ahead := make([][]*aheadRows, len(group))
	for i, cl := range group {
		ahead[i] = make([]*aheadRows, len(cl.first))
	}
	typeMap := c.conn.Conn().TypeMap()
	for _, text := range texts {
		rs := refs[text]
		rows, err := br.Query()
		if err == nil {
			var got []*aheadRows
			if got, err = copyRows(rows, typeMap, text, len(rs) > 1, len(rs)); err == nil {
				for m, r := range rs {
					ahead[r.call][r.read] = got[m]
				}
			}
		}
		if err != nil {
			br.Close()
			return nil, fmt.Errorf("read ahead: %w", err)
		}
	}
	return ahead, br.Close()
}

// typed returns a merged read's column of values of SQL type typ as one of
// the package's arrays (arrays.go) when every value is of its Go type, and as
// it is otherwise: pgx encodes a []any by reflection, value by value.
func typed(typ string, col []any) any {
	switch typ {
	case "bigint":
		if a, ok := typedAs[int64](col); ok {
			return int64Array(a)
		}
	case "text":
		if a, ok := typedAs[string](col); ok {
			return textArray(a)
		}
	case "timestamptz":
		a := make(nullTimeArray, len(col))
		var times []time.Time // one allocation for the times a clock gave
		for i, v := range col {
			switch t := v.(type) {
			case nil: // the database's clock
			case time.Time:
				if times == nil {
					times = make([]time.Time, len(col))
				}
				times[i] = t
				a[i] = &times[i]
			default:
				return col
			}
		}
		return a
	}
	return col
}

// typedAs returns col as a []T, if every value in it is a T.
func typedAs[T any](col []any) ([]T, bool) {
	a := make([]T, len(col))
	for i, v := range col {
		t, ok := v.(T)
		if !ok {
			return nil, false
		}
		a[i] = t
	}
	return a, true
}

// merged returns the statement that runs read text (with SKIP LOCKED) for
// each row of its parameters, given as arrays of the types, and returns
// the rows of each run, in order, after its number from 1.
//
// Each run is a lateral subquery that locks rows: one that locks cannot be
// flattened into a join, so every run is a lookup by key, whatever the
// plan cached for the statement (a generic plan made while the table was
// small, which the store's connection settings force).
func merged(text string, types []string) string {
	key := mergedKey{text, strings.Join(types, ",")}
	if v, ok := mergedSQL.Load(key); ok {
		return v.(string)
	}
	arrays := make([]string, len(types))
	cols := make([]string, len(types))
	for k, typ := range types {
		arrays[k] = fmt.Sprintf("$%d::%s[]", k+1, typ)
		cols[k] = fmt.Sprintf("p%d", k+1)
	}
	body := param.ReplaceAllString(skipLocked(text), "q.p$1")
	v := `SELECT q.i, x.* FROM unnest(` + strings.Join(arrays, ", ") + `) WITH ORDINALITY AS q(` +
		strings.Join(cols, ", ") + `, i) CROSS JOIN LATERAL (` + body + `) x`
	mergedSQL.Store(key, v)
	return v
}

type mergedKey struct{ text, types string }

var (
	param     = regexp.MustCompile(`\$(\d+)\b`)
	mergedSQL sync.Map // mergedKey → statement
)

// skipLocked turns the row locks of a read into ones that skip the rows
// other transactions hold. The reads are a few fixed texts: each is
// rewritten once, not once per transition.
func skipLocked(sql string) string {
	if v, ok := skipLockedSQL.Load(sql); ok {
		return v.(string)
	}
	v := forUpdate.ReplaceAllString(sql, "$0 SKIP LOCKED")
	skipLockedSQL.Store(sql, v)
	return v
}

var (
	forUpdate     = regexp.MustCompile(`FOR UPDATE( OF \w+)?`)
	skipLockedSQL sync.Map // a read's text → its text with SKIP LOCKED
)

// copyRows reads rows to the end into n aheadRows. With byRun, the rows
// are a merged read's: each opens with the number of its run, from 1,
// which is left out.
func copyRows(rows pgx.Rows, typeMap *pgtype.Map, sql string, byRun bool, n int) ([]*aheadRows, error) {
	// The connection reuses its field descriptions for the next result.
	fields := slices.Clone(rows.FieldDescriptions())
	first := fields[0]
	if byRun {
		fields = fields[1:]
	}
	out, each := make([]*aheadRows, n), make([]aheadRows, n)
	plans := &scanPlans{typeMap: typeMap, fields: fields}
	for i := range out {
		each[i] = aheadRows{sql: sql, fields: fields, plans: plans}
		out[i] = &each[i]
	}
	var (
		runPlan pgtype.ScanPlan
		bytes   byteChunks
		cells   cellChunks
	)
	for rows.Next() {
		raw := rows.RawValues()
		r := out[0]
		if byRun {
			var i int64
			if runPlan == nil {
				runPlan = typeMap.PlanScan(first.DataTypeOID, first.Format, &i)
			}
			if err := runPlan.Scan(raw[0], &i); err != nil {
				rows.Close()
				return nil, fmt.Errorf("merged read: run number: %w", err)
			}
			if i < 1 || int(i) > n {
				rows.Close()
				return nil, fmt.Errorf("merged read: row of run %d of %d", i, n)
			}
			r, raw = out[i-1], raw[1:]
		}
		// The rows' values are copied into a few shared chunks, not one
		// allocation or two a row: reads ahead are a group's largest
		// share of allocations. A NULL stays nil, an empty value empty.
		row := cells.take(len(raw))
		for j, v := range raw {
			if v != nil {
				row[j] = bytes.take(v)
			}
		}
		r.rows = append(r.rows, row)
	}
	rows.Close()
	for _, r := range out {
		r.tag = rows.CommandTag()
	}
	return out, rows.Err()
}

// byteChunks hands out copies of values from chunks that it allocates as
// they fill: a copy stays valid, since a chunk is never grown in place.
type byteChunks struct{ chunk []byte }

const chunkSize = 4 << 10

func (c *byteChunks) take(v []byte) []byte {
	if len(v) == 0 {
		return []byte{} // empty, not NULL
	}
	if len(v) > cap(c.chunk)-len(c.chunk) {
		if len(v) > chunkSize/4 {
			return append(make([]byte, 0, len(v)), v...) // a large value alone
		}
		c.chunk = make([]byte, 0, chunkSize)
	}
	c.chunk = append(c.chunk, v...)
	n := len(c.chunk)
	return c.chunk[n-len(v) : n : n]
}

// cellChunks hands out rows of cells, as byteChunks does bytes.
type cellChunks struct{ chunk [][]byte }

func (c *cellChunks) take(n int) [][]byte {
	if n > cap(c.chunk)-len(c.chunk) {
		c.chunk = make([][]byte, 0, max(n, 256))
	}
	c.chunk = c.chunk[:len(c.chunk)+n]
	m := len(c.chunk)
	return c.chunk[m-n : m : m]
}

// aheadRows are the rows of a read ahead, as pgx.Rows.
type aheadRows struct {
	sql    string
	fields []pgconn.FieldDescription
	plans  *scanPlans
	rows   [][][]byte
	tag    pgconn.CommandTag
	next   int // the row Next moves to
}

// scanPlans are the plans that scan the columns of a read into the types
// of the last destinations, shared by the rows of all the transitions the
// read served: they scan into the same types, and pgx's Map makes a plan
// afresh, with allocations, for every value it scans (as pgx's own rows
// do, a plan is kept while the destination's type stays the same). The
// transitions of a group scan one after another, never at once.
type scanPlans struct {
	typeMap *pgtype.Map
	fields  []pgconn.FieldDescription
	plans   []pgtype.ScanPlan
	types   []reflect.Type
}

// scan scans the values of a row into dest, as pgx.ScanRow would.
func (p *scanPlans) scan(values [][]byte, dest []any) error {
	if len(p.fields) != len(values) || len(p.fields) != len(dest) {
		return fmt.Errorf("read ahead: %d columns, %d values and %d destinations", len(p.fields), len(values), len(dest))
	}
	if p.plans == nil {
		p.plans, p.types = make([]pgtype.ScanPlan, len(dest)), make([]reflect.Type, len(dest))
	}
	for i, d := range dest {
		if d == nil {
			continue
		}
		f := &p.fields[i]
		if t := reflect.TypeOf(d); p.types[i] != t {
			p.plans[i], p.types[i] = p.typeMap.PlanScan(f.DataTypeOID, f.Format, d), t
		}
		if err := p.plans[i].Scan(values[i], d); err != nil {
			return pgx.ScanArgError{ColumnIndex: i, FieldName: f.Name, Err: err}
		}
	}
	return nil
}

func (r *aheadRows) Close()                                       { r.next = len(r.rows) + 1 }
func (r *aheadRows) Err() error                                   { return nil }
func (r *aheadRows) CommandTag() pgconn.CommandTag                { return r.tag }
func (r *aheadRows) FieldDescriptions() []pgconn.FieldDescription { return r.fields }
func (r *aheadRows) Conn() *pgx.Conn                              { return nil }
func (r *aheadRows) TypeMap() *pgtype.Map                         { return r.plans.typeMap }

func (r *aheadRows) Next() bool {
	r.next++
	return r.next <= len(r.rows)
}

func (r *aheadRows) RawValues() [][]byte { return r.rows[r.next-1] }

func (r *aheadRows) Scan(dest ...any) error {
	return r.plans.scan(r.rows[r.next-1], dest)
}

func (r *aheadRows) Values() ([]any, error) {
	row := r.rows[r.next-1]
	values := make([]any, len(row))
	for i, f := range r.fields {
		if row[i] == nil {
			continue
		}
		typ, ok := r.plans.typeMap.TypeForOID(f.DataTypeOID)
		if !ok {
			return nil, fmt.Errorf("read ahead: column %s: unknown type %d", f.Name, f.DataTypeOID)
		}
		v, err := typ.Codec.DecodeValue(r.plans.typeMap, f.DataTypeOID, f.Format, row[i])
		if err != nil {
			return nil, err
		}
		values[i] = v
	}
	return values, nil
}
