package postgres

import (
	"encoding/binary"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Array arguments that pgx encodes without boxing their elements.
//
// pgx reads an array argument element by element through
// pgtype.ArrayGetter, whose Index returns each element as an any: for a
// []string, []time.Time or []int64 that is an allocation per element, and
// the merged writes of a group carry thousands of elements (8 % of the
// engine process's allocations in the multi-process benchmark). These
// arrays hand out pointers to their elements instead, which box for free,
// typed so that pgx encodes them through its valuer interfaces.

// unboxed returns args with each array of a type below, or pointer to one
// (see insertCols), replaced by its unboxing wrapper; other arguments are
// kept as they are.
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

// dims is the one dimension of an array of n elements; a nil slice is NULL.
func dims(n int, null bool) []pgtype.ArrayDimension {
	if null {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(n), LowerBound: 1}}
}

type (
	textArray  []string
	timeArray  []time.Time
	int64Array []int64
	int32Array []int32
	boolArray  []bool

	textElem  string
	timeElem  time.Time
	int64Elem int64
	int32Elem int32
	boolElem  bool

	// Arrays whose nil elements are NULL, and of durations (intervals).
	nullTextArray []*string
	nullTimeArray []*time.Time
	durationArray []time.Duration
	durationElem  time.Duration
)

func (a textArray) Dimensions() []pgtype.ArrayDimension  { return dims(len(a), a == nil) }
func (a textArray) Index(i int) any                      { return (*textElem)(&a[i]) }
func (a textArray) IndexType() any                       { return (*textElem)(nil) }
func (a timeArray) Dimensions() []pgtype.ArrayDimension  { return dims(len(a), a == nil) }
func (a timeArray) Index(i int) any                      { return (*timeElem)(&a[i]) }
func (a timeArray) IndexType() any                       { return (*timeElem)(nil) }
func (a int64Array) Dimensions() []pgtype.ArrayDimension { return dims(len(a), a == nil) }
func (a int64Array) Index(i int) any                     { return (*int64Elem)(&a[i]) }
func (a int64Array) IndexType() any                      { return (*int64Elem)(nil) }
func (a int32Array) Dimensions() []pgtype.ArrayDimension { return dims(len(a), a == nil) }
func (a int32Array) Index(i int) any                     { return (*int32Elem)(&a[i]) }
func (a int32Array) IndexType() any                      { return (*int32Elem)(nil) }
func (a boolArray) Dimensions() []pgtype.ArrayDimension  { return dims(len(a), a == nil) }
func (a boolArray) Index(i int) any                      { return (*boolElem)(&a[i]) }
func (a boolArray) IndexType() any                       { return (*boolElem)(nil) }

func (a nullTextArray) Dimensions() []pgtype.ArrayDimension { return dims(len(a), a == nil) }
func (a nullTextArray) Index(i int) any                     { return (*textElem)(a[i]) }
func (a nullTextArray) IndexType() any                      { return (*textElem)(nil) }
func (a nullTimeArray) Dimensions() []pgtype.ArrayDimension { return dims(len(a), a == nil) }
func (a nullTimeArray) Index(i int) any                     { return (*timeElem)(a[i]) }
func (a nullTimeArray) IndexType() any                      { return (*timeElem)(nil) }
func (a durationArray) Dimensions() []pgtype.ArrayDimension { return dims(len(a), a == nil) }
func (a durationArray) Index(i int) any                     { return (*durationElem)(&a[i]) }
func (a durationArray) IndexType() any                      { return (*durationElem)(nil) }

// A nil element (of a nullTextArray or nullTimeArray) is NULL.

func (e *textElem) TextValue() (pgtype.Text, error) {
	if e == nil {
		return pgtype.Text{}, nil
	}
	return pgtype.Text{String: string(*e), Valid: true}, nil
}

func (e *timeElem) TimestamptzValue() (pgtype.Timestamptz, error) {
	if e == nil {
		return pgtype.Timestamptz{}, nil
	}
	return pgtype.Timestamptz{Time: time.Time(*e), Valid: true}, nil
}

func (e *durationElem) IntervalValue() (pgtype.Interval, error) {
	return pgtype.Interval{Microseconds: int64(time.Duration(*e) / time.Microsecond), Valid: true}, nil
}

func (e *int64Elem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*e), Valid: true}, nil
}

func (e *int32Elem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*e), Valid: true}, nil
}

func (e *boolElem) BoolValue() (pgtype.Bool, error) {
	return pgtype.Bool{Bool: bool(*e), Valid: true}, nil
}

// Encoding the arrays in one pass. pgx encodes an array element by
// element through interfaces, appending to a buffer that it shrinks again
// after every statement above 256 bytes: a group's array of event bodies
// (tens of KB) was regrown from there each time, by doubling, and each of
// its elements went through three interface calls. The store's own array
// types instead write PostgreSQL's binary array format directly into a
// buffer grown once to their size: 4× faster and a fourth of the bytes
// for 64 bodies of 400 bytes (BenchmarkArrayEncode). Every connection's
// codec of each array type the store sends (registerArrays) does this for
// them and leaves any other value to pgx's own codec.

// A binaryArray is one of the store's array types, which writes itself.
type binaryArray interface {
	elemOID() uint32            // its elements' type
	appendBinary([]byte) []byte // appends it in the binary array format
	isNil() bool                // a nil slice is NULL
}

// fastArrays is the codec of one array type: pgx's, but for the store's
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

// arrayElems are the array types the store sends, by their elements' type.
var arrayElems = map[uint32]uint32{
	pgtype.TextArrayOID:        pgtype.TextOID,
	pgtype.TimestamptzArrayOID: pgtype.TimestamptzOID,
	pgtype.Int8ArrayOID:        pgtype.Int8OID,
	pgtype.Int4ArrayOID:        pgtype.Int4OID,
	pgtype.BoolArrayOID:        pgtype.BoolOID,
	pgtype.IntervalArrayOID:    pgtype.IntervalOID,
}

// registerArrays makes m encode the store's arrays in one pass.
func registerArrays(m *pgtype.Map) {
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

// appendTime appends t's length and value as a timestamptz.
func appendTime(buf []byte, t time.Time) []byte {
	buf = binary.BigEndian.AppendUint32(buf, 8)
	return binary.BigEndian.AppendUint64(buf, uint64(t.Unix()*1_000_000+int64(t.Nanosecond())/1000-y2k))
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
	buf = appendHeader(buf, 12*len(a), len(a), pgtype.TimestamptzOID, false)
	for _, t := range a {
		buf = appendTime(buf, t)
	}
	return buf
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
		buf = appendTime(buf, *t)
	}
	return buf
}

func (a int64Array) elemOID() uint32 { return pgtype.Int8OID }
func (a int64Array) isNil() bool     { return a == nil }
func (a int64Array) appendBinary(buf []byte) []byte {
	buf = appendHeader(buf, 12*len(a), len(a), pgtype.Int8OID, false)
	for _, v := range a {
		buf = binary.BigEndian.AppendUint32(buf, 8)
		buf = binary.BigEndian.AppendUint64(buf, uint64(v))
	}
	return buf
}

func (a int32Array) elemOID() uint32 { return pgtype.Int4OID }
func (a int32Array) isNil() bool     { return a == nil }
func (a int32Array) appendBinary(buf []byte) []byte {
	buf = appendHeader(buf, 8*len(a), len(a), pgtype.Int4OID, false)
	for _, v := range a {
		buf = binary.BigEndian.AppendUint32(buf, 4)
		buf = binary.BigEndian.AppendUint32(buf, uint32(v))
	}
	return buf
}

func (a boolArray) elemOID() uint32 { return pgtype.BoolOID }
func (a boolArray) isNil() bool     { return a == nil }
func (a boolArray) appendBinary(buf []byte) []byte {
	buf = appendHeader(buf, 5*len(a), len(a), pgtype.BoolOID, false)
	for _, v := range a {
		b := byte(0)
		if v {
			b = 1
		}
		buf = binary.BigEndian.AppendUint32(buf, 1)
		buf = append(buf, b)
	}
	return buf
}

func (a durationArray) elemOID() uint32 { return pgtype.IntervalOID }
func (a durationArray) isNil() bool     { return a == nil }
func (a durationArray) appendBinary(buf []byte) []byte {
	buf = appendHeader(buf, 20*len(a), len(a), pgtype.IntervalOID, false)
	for _, d := range a {
		buf = binary.BigEndian.AppendUint32(buf, 16)
		buf = binary.BigEndian.AppendUint64(buf, uint64(d/time.Microsecond))
		buf = binary.BigEndian.AppendUint64(buf, 0) // days and months
	}
	return buf
}
