package pgtx

import (
	"bytes"
	"fmt"
	"testing"
)

// TestChunksCopyValues: every value handed out is a copy that later
// values never overwrite, an empty value stays empty and not nil, and
// values too large for a chunk are copied alone.
func TestChunksCopyValues(t *testing.T) {
	t.Parallel()
	var (
		c    byteChunks
		src  = make([]byte, chunkSize)
		want [][]byte
		got  [][]byte
	)
	for i := range 500 {
		v := fmt.Appendf(src[:0], "value-%d", i)
		if i%7 == 0 {
			v = bytes.Repeat([]byte{byte(i)}, chunkSize/4+i) // large
		}
		want = append(want, bytes.Clone(v))
		got = append(got, c.take(v))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("value %d = %q, want %q", i, got[i], want[i])
		}
		if i > 0 && cap(got[i-1]) != len(got[i-1]) {
			t.Fatalf("value %d has room to grow into the next", i-1)
		}
	}
	if e := c.take([]byte{}); e == nil || len(e) != 0 {
		t.Fatalf("empty value = %#v, want empty and not nil", e)
	}

	var cells cellChunks
	rows := make([][][]byte, 300)
	for i := range rows {
		rows[i] = cells.take(3)
		rows[i][0] = []byte{byte(i)}
	}
	for i, r := range rows {
		if len(r) != 3 || cap(r) != 3 || r[0][0] != byte(i) {
			t.Fatalf("row %d = %v", i, r)
		}
	}
}
