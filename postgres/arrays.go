package postgres

import (
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
