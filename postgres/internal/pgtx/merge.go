package pgtx

import (
	"reflect"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Merging writes. The transitions of a group that are decided between two
// reads send their writes together, and most of them write the same few
// statements with other values: each TaskFail that retries at once one
// statement of the same text, each end of a run another. Each statement
// costs the server more to start than these small writes cost to run, so
// the writes of the same text that go together are sent as one statement,
// their array arguments joined: n retries at once cost one statement.
//
// A statement may be merged only if its text says so (Tx.QueueMergeable): all
// its arguments are arrays, each row of which writes on its own, so that
// the joined statement writes what the statements would have one after
// the other; and if it returns rows that its transition reads, each row
// says which run it is for, and the transition reads only its own (each
// is handed all the rows of the joined statement).
//
// The writes that go together belong to transitions that lock different
// runs (ahead.go: a transition that locks a run an earlier one holds reads
// again, which sends what is queued, before it writes), so the statements
// of different transitions may run in any order; the statements of each
// transition keep theirs.

var mergeableSQL sync.Map // statement text → true

// markMergeable marks qq's text as mergeable, and returns qq. The texts
// are few and marked over and over: a sync.Map Store each time would
// allocate.
func markMergeable(qq *pgx.QueuedQuery) *pgx.QueuedQuery {
	if _, ok := mergeableSQL.Load(qq.SQL); !ok {
		mergeableSQL.Store(qq.SQL, true)
	}
	return qq
}

// merge returns the statements of chains, each a transition's writes in
// order, with those of the same mergeable text that can go together as one,
// and how many statements it made of several. It walks the chains in order
// and sends the first one's next statement with the next statements of
// all chains that have the same text.
func merge(chains [][]*pgx.QueuedQuery) (out []*pgx.QueuedQuery, merged int) {
	if len(chains) == 1 {
		return chains[0], 0
	}
	next := make([]int, len(chains)) // each chain's next statement
	for i, chain := range chains {
		for next[i] < len(chain) {
			qq := chain[next[i]]
			next[i]++
			if _, ok := mergeableSQL.Load(qq.SQL); !ok {
				out = append(out, qq)
				continue
			}
			same := [][]any{qq.Arguments}
			fns := []func(pgx.BatchResults) error{qq.Fn}
			for j := i + 1; j < len(chains); j++ {
				if next[j] >= len(chains[j]) {
					continue
				}
				other := chains[j][next[j]]
				if other.SQL != qq.SQL || (other.Fn == nil) != (qq.Fn == nil) || !sameTypes(qq.Arguments, other.Arguments) {
					continue
				}
				same = append(same, other.Arguments)
				fns = append(fns, other.Fn)
				next[j]++
			}
			joined := qq
			if len(same) > 1 {
				merged++
				joined = &pgx.QueuedQuery{SQL: qq.SQL, Arguments: join(same)}
				if qq.Fn != nil {
					joined.Fn = shareRows(fns)
				}
			}
			out = append(out, joined)
		}
	}
	return out, merged
}

// shareRows returns the function of a merged statement that reads its rows
// and hands them all to each of fns, the functions of the statements
// merged into it.
func shareRows(fns []func(pgx.BatchResults) error) func(pgx.BatchResults) error {
	return func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		got, err := copyRows(rows, rows.Conn().TypeMap(), "", false, 1)
		if err != nil {
			return err
		}
		for _, fn := range fns {
			if err := fn(sharedRows{got[0]}); err != nil {
				return err
			}
		}
		return nil
	}
}

// sharedRows are the rows of a merged statement, as pgx.BatchResults for
// the function of one statement merged into it.
type sharedRows struct{ rows *aheadRows }

func (r sharedRows) Exec() (pgconn.CommandTag, error) { return r.rows.tag, nil }
func (r sharedRows) Query() (pgx.Rows, error) {
	rows := *r.rows // each reads from the start
	rows.next = 0
	return &rows, nil
}
func (r sharedRows) QueryRow() pgx.Row {
	rows, err := r.Query()
	return &firstRow{rows: rows, err: err}
}
func (r sharedRows) Close() error { return nil }
func (r sharedRows) Tx() pgx.Tx   { return nil }

// sameTypes reports whether a and b are arguments of the same types, all
// arrays or pointers to arrays.
func sameTypes(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		ta := reflect.TypeOf(a[k])
		if ta == nil || ta != reflect.TypeOf(b[k]) {
			return false
		}
		if ta.Kind() == reflect.Pointer {
			ta = ta.Elem()
		}
		if ta.Kind() != reflect.Slice {
			return false
		}
	}
	return true
}

// join returns the arguments of statements of the same text, checked by
// sameTypes: at each position, the arrays of all of them, one after the
// other. The element types the store's statements use are joined without
// reflection, whose appends cost two allocations each: a sixth of the
// engine process's allocations, when all were reflected.
func join(args [][]any) []any {
	joined := make([]any, len(args[0]))
	for k := range joined {
		switch args[0][k].(type) {
		case []string, *[]string:
			joined[k] = joinAs[string](args, k)
		case []int64, *[]int64:
			joined[k] = joinAs[int64](args, k)
		case []int32, *[]int32:
			joined[k] = joinAs[int32](args, k)
		case []bool, *[]bool:
			joined[k] = joinAs[bool](args, k)
		case []time.Time, *[]time.Time:
			joined[k] = joinAs[time.Time](args, k)
		case []*string, *[]*string:
			joined[k] = joinAs[*string](args, k)
		case []*time.Time, *[]*time.Time:
			joined[k] = joinAs[*time.Time](args, k)
		case []time.Duration, *[]time.Duration:
			joined[k] = joinAs[time.Duration](args, k)
		default:
			joined[k] = joinReflected(args, k)
		}
	}
	return joined
}

// joinAs joins the arrays of type []T (or *[]T) at position k of args.
func joinAs[T any](args [][]any, k int) []T {
	n := 0
	for _, a := range args {
		n += len(arrayOf[T](a[k]))
	}
	out := make([]T, 0, n)
	for _, a := range args {
		out = append(out, arrayOf[T](a[k])...)
	}
	return out
}

// arrayOf returns v, a []T or a *[]T, as a []T.
func arrayOf[T any](v any) []T {
	if p, ok := v.(*[]T); ok {
		return *p
	}
	return v.([]T)
}

// joinReflected joins the arrays at position k of args, of any type, or
// the arrays they point to.
func joinReflected(args [][]any, k int) any {
	elem := func(a []any) reflect.Value {
		v := reflect.ValueOf(a[k])
		if v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		return v
	}
	n := 0
	for _, a := range args {
		n += elem(a).Len()
	}
	v := reflect.MakeSlice(elem(args[0]).Type(), 0, n)
	for _, a := range args {
		v = reflect.AppendSlice(v, elem(a))
	}
	return v.Interface()
}
