package pgtx

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// TestUnboxedArraysEncodeAsPlain checks that each of the package's arrays,
// written by its own encoder (RegisterArrays), encodes to the same bytes as
// pgx encodes the slice it wraps, NULL for a nil slice included, and that
// it allocates the same whatever its length.
func TestUnboxedArraysEncodeAsPlain(t *testing.T) { //nolint:paralleltest // testing.AllocsPerRun refuses to run in a parallel test
	at := time.Date(2026, 11, 24, 13, 0, 0, 123456000, time.UTC)
	const n = 100
	texts, times, int64s, int32s, bools := make([]string, n), make([]time.Time, n), make([]int64, n), make([]int32, n), make([]bool, n)
	for i := range n {
		texts[i] = fmt.Sprintf("run-%d", i)
		times[i] = at.Add(time.Duration(i) * time.Millisecond)
		int64s[i], int32s[i], bools[i] = int64(i)<<40, int32(-i), i%3 == 0
	}
	ptrs, ptimes, durations := make([]*string, n), make([]*time.Time, n), make([]time.Duration, n)
	for i := range n {
		if i%4 != 0 { // every fourth NULL
			ptrs[i], ptimes[i] = &texts[i], &times[i]
		}
		durations[i] = time.Duration(i)*time.Hour + time.Duration(i)*time.Microsecond
	}
	m, fast := pgtype.NewMap(), pgtype.NewMap()
	RegisterArrays(fast)
	for _, c := range []struct {
		oid   uint32
		plain any
	}{
		{pgtype.TextArrayOID, texts},
		{pgtype.TimestamptzArrayOID, times},
		{pgtype.Int8ArrayOID, int64s},
		{pgtype.Int4ArrayOID, int32s},
		{pgtype.BoolArrayOID, bools},
		{pgtype.TextArrayOID, &texts},
		{pgtype.TimestamptzArrayOID, &times},
		{pgtype.Int8ArrayOID, &int64s},
		{pgtype.Int4ArrayOID, &int32s},
		{pgtype.TextArrayOID, ptrs},
		{pgtype.TimestamptzArrayOID, ptimes},
		{pgtype.IntervalArrayOID, durations},
		{pgtype.BoolArrayOID, &bools},
		{pgtype.TextArrayOID, &ptrs},
		{pgtype.TimestamptzArrayOID, &ptimes},
		{pgtype.IntervalArrayOID, &durations},
		{pgtype.TextArrayOID, []string(nil)},
		{pgtype.TextArrayOID, []string{}},
		{pgtype.TextArrayOID, []*string{nil, nil}},
		{pgtype.TextArrayOID, []*string(nil)},
		{pgtype.TimestamptzArrayOID, []*time.Time{}},
		{pgtype.Int8ArrayOID, []int64(nil)},
		{pgtype.IntervalArrayOID, []time.Duration{}},
		{pgtype.BoolArrayOID, []bool(nil)},
	} {
		arg := unboxed([]any{c.plain})[0]
		if reflect.TypeOf(arg).Kind() != reflect.Slice {
			t.Errorf("unboxed(%T) = %T, want one of the package's arrays", c.plain, arg)
		}
		name := fmt.Sprintf("%T of %v", arg, c.plain != nil)
		want, err := m.Encode(c.oid, pgtype.BinaryFormatCode, c.plain, nil)
		if err != nil {
			t.Fatalf("%s: plain: %v", name, err)
		}
		if _, ok := fast.PlanEncode(c.oid, pgtype.BinaryFormatCode, arg).(encodeBinaryArray); !ok {
			t.Errorf("%s is not encoded by the package's encoder", name)
		}
		got, err := fast.Encode(c.oid, pgtype.BinaryFormatCode, arg, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got, want) || (got == nil) != (want == nil) {
			t.Errorf("%s encodes as %x, want %x", name, got, want)
		}
	}

	buf := make([]byte, 0, 64<<10)
	allocs := func(arg any) float64 {
		return testing.AllocsPerRun(20, func() {
			if _, err := fast.Encode(pgtype.TextArrayOID, pgtype.BinaryFormatCode, arg, buf[:0]); err != nil {
				t.Fatal(err)
			}
		})
	}
	short, long := allocs(unboxed([]any{texts[:2]})[0]), allocs(unboxed([]any{texts})[0])
	if long > short {
		t.Errorf("encoding %d strings: %v allocations, %d strings: %v; want no more for more", n, long, 2, short)
	}
}

// TestArraysOfAnotherTypeGoToPgx checks that one of the package's arrays sent as an
// array of another element type is left to pgx's codec, which converts it.
func TestArraysOfAnotherTypeGoToPgx(t *testing.T) {
	t.Parallel()
	m, fast := pgtype.NewMap(), pgtype.NewMap()
	RegisterArrays(fast)
	arg := int64Array{1, 2, 3}
	if _, ok := fast.PlanEncode(pgtype.Int4ArrayOID, pgtype.BinaryFormatCode, arg).(encodeBinaryArray); ok {
		t.Fatal("an int64Array as int4[] went to the package's encoder")
	}
	want, err := m.Encode(pgtype.Int4ArrayOID, pgtype.BinaryFormatCode, arg, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := fast.Encode(pgtype.Int4ArrayOID, pgtype.BinaryFormatCode, arg, nil)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("int64Array as int4[]: %x, %v; want %x", got, err, want)
	}
}

// BenchmarkArrayEncode encodes the event bodies of a group's insert, 64
// of 400 bytes, as pgx encodes a []string and with the package's encoder.
func BenchmarkArrayEncode(b *testing.B) {
	bodies := make(textArray, 64)
	for i := range bodies {
		bodies[i] = strings.Repeat("x", 400)
	}
	m, fast := pgtype.NewMap(), pgtype.NewMap()
	RegisterArrays(fast)
	for _, c := range []struct {
		name string
		m    *pgtype.Map
		arg  any
	}{{"pgx", m, []string(bodies)}, {"pgtx", fast, bodies}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				// pgx's buffer after a statement above 256 bytes.
				if _, err := c.m.Encode(pgtype.TextArrayOID, pgtype.BinaryFormatCode, c.arg, make([]byte, 0, 256)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestTypedColumnsEncodeAsAny checks that a merged read's column becomes
// one of the package's arrays when its values allow, and that it encodes to
// the bytes pgx makes of the []any it came from.
func TestTypedColumnsEncodeAsAny(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 24, 13, 0, 0, 123456000, time.UTC)
	m, fast := pgtype.NewMap(), pgtype.NewMap()
	RegisterArrays(fast)
	for _, c := range []struct {
		typ   string
		oid   uint32
		col   []any
		typed bool
	}{
		{"bigint", pgtype.Int8ArrayOID, []any{int64(1), int64(-2) << 40}, true},
		{"bigint", pgtype.Int8ArrayOID, []any{int64(1), nil}, false},
		{"text", pgtype.TextArrayOID, []any{"run-1", ""}, true},
		{"text", pgtype.TextArrayOID, []any{"run-1", nil}, false},
		{"timestamptz", pgtype.TimestamptzArrayOID, []any{nil, nil}, true},
		{"timestamptz", pgtype.TimestamptzArrayOID, []any{at, nil, at.Add(time.Hour)}, true},
		{"int", pgtype.Int4ArrayOID, []any{int32(3)}, false},
	} {
		arg := typed(c.typ, c.col)
		if _, isAny := arg.([]any); isAny == c.typed {
			t.Errorf("typed(%s, %v) = %T, want typed %v", c.typ, c.col, arg, c.typed)
		}
		want, err := m.Encode(c.oid, pgtype.BinaryFormatCode, c.col, nil)
		if err != nil {
			t.Fatalf("%s %v: %v", c.typ, c.col, err)
		}
		got, err := fast.Encode(c.oid, pgtype.BinaryFormatCode, arg, nil)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s %v encodes as %x, %v; want %x", c.typ, c.col, got, err, want)
		}
	}
}
