package postgres

import (
	"reflect"
	"testing"
	"time"
)

// TestJoin: the arrays of each position, typed or reflected, one after the
// other in the statements' order.
func TestJoin(t *testing.T) {
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
