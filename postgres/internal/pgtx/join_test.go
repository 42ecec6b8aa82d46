package pgtx

import (
	"reflect"
	"testing"
	"time"
)

// TestJoin: the arrays of each position, typed or reflected, one after the
// other in the statements' order.
func TestJoin(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(0, 0).UTC()
	args := [][]any{
		{[]string{"a"}, []int64{1}, []int32{7}, []bool{true}, []time.Time{t0}, []float64{0.5}},
		{[]string{"b", "c"}, []int64{2, 3}, []int32{8, 9}, []bool{false, true}, []time.Time{t0.Add(time.Second), t0}, []float64{1.5, 2.5}},
	}
	want := []any{
		[]string{"a", "b", "c"}, []int64{1, 2, 3}, []int32{7, 8, 9}, []bool{true, false, true},
		[]time.Time{t0, t0.Add(time.Second), t0}, []float64{0.5, 1.5, 2.5},
	}
	if got := join(args); !reflect.DeepEqual(got, want) {
		t.Errorf("join = %v\nwant   %v", got, want)
	}
}

// TestJoinPointers: arrays passed as pointers to them (as the store passes
// its own) join as the arrays, and merge only with arguments of the same
// types.
func TestJoinPointers(t *testing.T) {
	t.Parallel()
	a, b := []string{"a"}, []string{"b", "c"}
	n, m := []int64{1}, []int64{2, 3}
	f, g := []float64{0.5}, []float64{1.5}
	args := [][]any{{&a, &n, &f}, {&b, &m, &g}}
	if !sameTypes(args[0], args[1]) {
		t.Fatal("sameTypes of pointers to arrays of the same types = false")
	}
	if sameTypes([]any{&a}, []any{b}) || sameTypes([]any{new(int)}, []any{new(int)}) {
		t.Fatal("sameTypes of a pointer and an array, or of pointers to scalars = true")
	}
	want := []any{[]string{"a", "b", "c"}, []int64{1, 2, 3}, []float64{0.5, 1.5}}
	if got := join(args); !reflect.DeepEqual(got, want) {
		t.Errorf("join = %v\nwant   %v", got, want)
	}
	if got := unboxed([]any{&a, &n})[0]; !reflect.DeepEqual(got, textArray(a)) {
		t.Errorf("unboxed(&[]string) = %#v, want textArray", got)
	}
}
