package postgres

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"

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
// and RunRenew, would then deadlock more often than one at a time). A read
// ahead that finds nothing, or not all it locks (a run's parent), may have
// met a row another transaction holds: the transition reads again, in
// turn, and waits as it always did (errStale).
//
// A read sent ahead ran before the writes of the transitions that come
// before it in the group. Each such transition records the runs it locks
// (txn.own), and a transition whose read ahead locked a run that one of
// them holds runs again, reading after their writes (errStale). A
// transition that records nothing (call.owns unset) may have written
// anywhere: the reads ahead of those after it are not used.

// errStale reports that a transition read ahead a run that a transition
// before it in its group holds: what it read may predate their writes.
var errStale = errors.New("read ahead of a transition that holds the same run")

// readAhead sends BEGIN and what else is queued, with the first reads of
// the group's calls that declared one (and whose context is alive), and
// returns each read's rows, copied, by call.
func (c *conversation) readAhead(group []*call) ([]*aheadRows, error) {
	b := &pgx.Batch{QueuedQueries: c.queued}
	c.queued = nil
	n := len(b.QueuedQueries)
	var reads []int
	for i, cl := range group {
		if cl.first != nil && cl.ctx.Err() == nil {
			b.Queue(skipLocked(cl.first.SQL), cl.first.Arguments...)
			reads = append(reads, i)
		}
	}
	if len(reads) == 0 {
		c.queued = b.QueuedQueries // to go with the first read
		return nil, nil
	}
	br := c.conn.SendBatch(c.ctx, b)
	for _, qq := range b.QueuedQueries[:n] {
		if err := result(br, qq); err != nil {
			br.Close()
			return nil, fmt.Errorf("queued statements: %w", err)
		}
	}
	ahead := make([]*aheadRows, len(group))
	typeMap := c.conn.Conn().TypeMap()
	for _, i := range reads {
		rows, err := br.Query()
		if err == nil {
			ahead[i], err = copyRows(rows, typeMap, group[i].first.SQL)
		}
		if err != nil {
			br.Close()
			return nil, fmt.Errorf("read ahead: %w", err)
		}
	}
	return ahead, br.Close()
}

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

// copyRows reads rows to the end into an aheadRows.
func copyRows(rows pgx.Rows, typeMap *pgtype.Map, sql string) (*aheadRows, error) {
	// The connection reuses its field descriptions for the next result.
	r := &aheadRows{sql: sql, typeMap: typeMap, fields: slices.Clone(rows.FieldDescriptions())}
	for rows.Next() {
		raw := rows.RawValues()
		row := make([][]byte, len(raw))
		for j, v := range raw {
			if v != nil {
				row[j] = append([]byte{}, v...)
			}
		}
		r.rows = append(r.rows, row)
	}
	rows.Close()
	r.tag = rows.CommandTag()
	return r, rows.Err()
}

// own records that the transition holds the locks of the runs ids. If its
// data came from a read ahead and a transition before it in the group
// holds one of them, it returns errStale: the transition must run again.
func (t *txn) own(ids ...string) error {
	owners := t.c.owners
	if owners == nil { // a transaction of its own
		return nil
	}
	if t.ahead {
		for _, id := range ids {
			if o := owners[id]; o != nil && o != t {
				return errStale
			}
		}
	}
	for _, id := range ids {
		if id != "" {
			owners[id] = t
		}
	}
	return nil
}

// aheadRows are the rows of a read ahead, as pgx.Rows.
type aheadRows struct {
	sql     string
	typeMap *pgtype.Map
	fields  []pgconn.FieldDescription
	rows    [][][]byte
	tag     pgconn.CommandTag
	next    int // the row Next moves to
}

func (r *aheadRows) Close()                                       { r.next = len(r.rows) + 1 }
func (r *aheadRows) Err() error                                   { return nil }
func (r *aheadRows) CommandTag() pgconn.CommandTag                { return r.tag }
func (r *aheadRows) FieldDescriptions() []pgconn.FieldDescription { return r.fields }
func (r *aheadRows) Conn() *pgx.Conn                              { return nil }
func (r *aheadRows) TypeMap() *pgtype.Map                         { return r.typeMap }

func (r *aheadRows) Next() bool {
	r.next++
	return r.next <= len(r.rows)
}

func (r *aheadRows) RawValues() [][]byte { return r.rows[r.next-1] }

func (r *aheadRows) Scan(dest ...any) error {
	return pgx.ScanRow(r.typeMap, r.fields, r.rows[r.next-1], dest...)
}

func (r *aheadRows) Values() ([]any, error) {
	row := r.rows[r.next-1]
	values := make([]any, len(row))
	for i, f := range r.fields {
		if row[i] == nil {
			continue
		}
		typ, ok := r.typeMap.TypeForOID(f.DataTypeOID)
		if !ok {
			return nil, fmt.Errorf("read ahead: column %s: unknown type %d", f.Name, f.DataTypeOID)
		}
		v, err := typ.Codec.DecodeValue(r.typeMap, f.DataTypeOID, f.Format, row[i])
		if err != nil {
			return nil, err
		}
		values[i] = v
	}
	return values, nil
}
