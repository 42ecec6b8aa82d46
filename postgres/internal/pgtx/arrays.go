package pgtx

import (
	"encoding/binary"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// The array arguments of the statements a group sends, which write
// themselves.
//
// pgx encodes an array argument element by element, through
// pgtype.ArrayGetter, whose Index returns each element as an any (for a
// []string, []time.Time or []int64 an allocation per element), and through
// interfaces per element; it appends to a buffer that it shrinks again
// after every statement above 256 bytes, so a group's array of event
// bodies (tens of KB) was regrown from there each time, by doubling. The
// merged writes of a group carry thousands of elements. The array types
// here instead write PostgreSQL's binary array format directly into a
// buffer grown once to their size: 4× faster and a fourth of the bytes for
// 64 bodies of 400 bytes (BenchmarkArrayEncode). Every connection's codec
// of each array type a group sends (RegisterArrays) does this for them
// and leaves any other value, or these sent as another type, to pgx, which
// encodes slices by reflection. The statements' arguments are plain slices
// ([]string, []int64, …), or pointers to them, which box without an
// allocation of their own; a group replaces them with these types as it
// sends them (unboxed).

// unboxed returns args with each array of a type below, or pointer to one,
// replaced by the package's array of it; other arguments are kept as they
// are.
func unboxed(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case []string:
			out[i] = textArray(v)
		case *[]string:
			out[i] = textArray(*v)
		case []time.Time:
			out[i] = timeArray(v)
		case *[]time.Time:
			out[i] = timeArray(*v)
		case []int64:
			out[i] = int64Array(v)
		case *[]int64:
			out[i] = int64Array(*v)
		case []int32:
			out[i] = int32Array(v)
		case *[]int32:
			out[i] = int32Array(*v)
		case []bool:
			out[i] = boolArray(v)
		case *[]bool:
			out[i] = boolArray(*v)
		case []*string:
			out[i] = nullTextArray(v)
		case *[]*string:
			out[i] = nullTextArray(*v)
		case []*time.Time:
			out[i] = nullTimeArray(v)
		case *[]*time.Time:
			out[i] = nullTimeArray(*v)
		case []time.Duration:
			out[i] = durationArray(v)
		case *[]time.Duration:
			out[i] = durationArray(*v)
		default:
			out[i] = a
		}
	}
	return out
}

// unboxAll replaces the arguments of each statement of qs (see unboxed).
func unboxAll(qs []*pgx.QueuedQuery) {
	for _, qq := range qs {
		if len(qq.Arguments) > 0 {
			qq.Arguments = unboxed(qq.Arguments)
		}
	}
}

type (
	textArray  []string
	timeArray  []time.Time
	int64Array []int64
	int32Array []int32
	boolArray  []bool

	// Arrays whose nil elements are NULL, and of durations (intervals).
	nullTextArray []*string
	nullTimeArray []*time.Time
	durationArray []time.Duration
)

// A binaryArray is one of the package's array types, which writes itself.
type binaryArray interface {
	elemOID() uint32            // its elements' type
	appendBinary([]byte) []byte // appends it in the binary array format
	isNil() bool                // a nil slice is NULL
}

// fastArrays is the codec of one array type: pgx's, but for the package's
// arrays of its element type.
type fastArrays struct {
	pgtype.Codec
	elem uint32
}

func (c fastArrays) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if a, ok := value.(binaryArray); ok && format == pgtype.BinaryFormatCode && a.elemOID() == c.elem {
		return encodeBinaryArray{}
	}
	return c.Codec.PlanEncode(m, oid, format, value)
}

type encodeBinaryArray struct{}

func (encodeBinaryArray) Encode(value any, buf []byte) ([]byte, error) {
	a := value.(binaryArray)
	if a.isNil() {
		return nil, nil
	}
	return a.appendBinary(buf), nil
}

// arrayElems are the array types a group sends, by their elements' type.
var arrayElems = map[uint32]uint32{
	pgtype.TextArrayOID:        pgtype.TextOID,
	pgtype.TimestamptzArrayOID: pgtype.TimestamptzOID,
	pgtype.Int8ArrayOID:        pgtype.Int8OID,
	pgtype.Int4ArrayOID:        pgtype.Int4OID,
	pgtype.BoolArrayOID:        pgtype.BoolOID,
	pgtype.IntervalArrayOID:    pgtype.IntervalOID,
}

// RegisterArrays makes m, a connection's type map, encode the arrays that
// a group sends in one pass: the grouped path's connections are set up
// with it (pgxpool.Config.AfterConnect).
func RegisterArrays(m *pgtype.Map) {
	for oid, elem := range arrayElems {
		if t, ok := m.TypeForOID(oid); ok {
			m.RegisterType(&pgtype.Type{Name: t.Name, OID: oid, Codec: fastArrays{Codec: t.Codec, elem: elem}})
		}
	}
}

// appendHeader grows buf by size bytes of elements and the header of an
// array of n elements of type elem, and appends the header.
func appendHeader(buf []byte, size, n int, elem uint32, hasNull bool) []byte {
	buf = slices.Grow(buf, 20+size)
	null := uint32(0)
	if hasNull {
		null = 1
	}
	buf = binary.BigEndian.AppendUint32(buf, 1) // dimensions
	buf = binary.BigEndian.AppendUint32(buf, null)
	buf = binary.BigEndian.AppendUint32(buf, elem)
	buf = binary.BigEndian.AppendUint32(buf, uint32(n))
	return binary.BigEndian.AppendUint32(buf, 1) // lower bound
}

// nullElem is the length that marks an element NULL.
const nullElem = 0xFFFFFFFF

// y2k is PostgreSQL's epoch for timestamps, in µs after Unix's.
const y2k = 946_684_800 * 1_000_000

// appendTime appends t as a timestamptz's value.
func appendTime(buf []byte, t time.Time) []byte {
	return binary.BigEndian.AppendUint64(buf, uint64(t.Unix()*1_000_000+int64(t.Nanosecond())/1000-y2k))
}

// appendFixed appends a, an array of elements of type elem and of width
// bytes each, which put appends.
func appendFixed[T any](buf []byte, a []T, elem uint32, width int, put func([]byte, T) []byte) []byte {
	buf = appendHeader(buf, (4+width)*len(a), len(a), elem, false)
	for _, v := range a {
		buf = binary.BigEndian.AppendUint32(buf, uint32(width))
		buf = put(buf, v)
	}
	return buf
}

func (a textArray) elemOID() uint32 { return pgtype.TextOID }
func (a textArray) isNil() bool     { return a == nil }
func (a textArray) appendBinary(buf []byte) []byte {
	size := 4 * len(a)
	for _, s := range a {
		size += len(s)
	}
	buf = appendHeader(buf, size, len(a), pgtype.TextOID, false)
	for _, s := range a {
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(s)))
		buf = append(buf, s...)
	}
	return buf
}

func (a nullTextArray) elemOID() uint32 { return pgtype.TextOID }
func (a nullTextArray) isNil() bool     { return a == nil }
func (a nullTextArray) appendBinary(buf []byte) []byte {
	size, hasNull := 4*len(a), false
	for _, s := range a {
		if s == nil {
			hasNull = true
		} else {
			size += len(*s)
		}
	}
	buf = appendHeader(buf, size, len(a), pgtype.TextOID, hasNull)
	for _, s := range a {
		if s == nil {
			buf = binary.BigEndian.AppendUint32(buf, nullElem)
			continue
		}
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(*s)))
		buf = append(buf, *s...)
	}
	return buf
}

func (a timeArray) elemOID() uint32 { return pgtype.TimestamptzOID }
func (a timeArray) isNil() bool     { return a == nil }
func (a timeArray) appendBinary(buf []byte) []byte {
	return appendFixed(buf, a, pgtype.TimestamptzOID, 8, appendTime)
}

func (a nullTimeArray) elemOID() uint32 { return pgtype.TimestamptzOID }
func (a nullTimeArray) isNil() bool     { return a == nil }
func (a nullTimeArray) appendBinary(buf []byte) []byte {
	buf = appendHeader(buf, 12*len(a), len(a), pgtype.TimestamptzOID, slices.Contains(a, nil))
	for _, t := range a {
		if t == nil {
			buf = binary.BigEndian.AppendUint32(buf, nullElem)
			continue
		}
		buf = binary.BigEndian.AppendUint32(buf, 8)
		buf = appendTime(buf, *t)
	}
	return buf
}

func (a int64Array) elemOID() uint32 { return pgtype.Int8OID }
func (a int64Array) isNil() bool     { return a == nil }
func (a int64Array) appendBinary(buf []byte) []byte {
	return appendFixed(buf, a, pgtype.Int8OID, 8, func(b []byte, v int64) []byte {
		return binary.BigEndian.AppendUint64(b, uint64(v))
	})
}

func (a int32Array) elemOID() uint32 { return pgtype.Int4OID }
func (a int32Array) isNil() bool     { return a == nil }
func (a int32Array) appendBinary(buf []byte) []byte {
	return appendFixed(buf, a, pgtype.Int4OID, 4, func(b []byte, v int32) []byte {
		return binary.BigEndian.AppendUint32(b, uint32(v))
	})
}

func (a boolArray) elemOID() uint32 { return pgtype.BoolOID }
func (a boolArray) isNil() bool     { return a == nil }
func (a boolArray) appendBinary(buf []byte) []byte {
	return appendFixed(buf, a, pgtype.BoolOID, 1, func(b []byte, v bool) []byte {
		if v {
			return append(b, 1)
		}
		return append(b, 0)
	})
}

func (a durationArray) elemOID() uint32 { return pgtype.IntervalOID }
func (a durationArray) isNil() bool     { return a == nil }
func (a durationArray) appendBinary(buf []byte) []byte {
	return appendFixed(buf, a, pgtype.IntervalOID, 16, func(b []byte, d time.Duration) []byte {
		b = binary.BigEndian.AppendUint64(b, uint64(d/time.Microsecond))
		return binary.BigEndian.AppendUint64(b, 0) // days and months
	})
}
