package flow

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// A Pos is a place in a flow file: line and column from 1, the column
// counted in characters. The zero Pos is unknown.
type Pos struct {
	Line, Col int
}

// An Error is one thing wrong with a flow file, and where.
type Error struct {
	File string
	Pos  Pos
	Msg  string
}

func (e *Error) Error() string {
	switch {
	case e.Pos.Line == 0:
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	case e.Pos.Col == 0:
		return fmt.Sprintf("%s:%d: %s", e.File, e.Pos.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Pos.Line, e.Pos.Col, e.Msg)
}

// ErrorList is the errors Parse found in a flow file, in the order of
// their places in it: at most a hundred, then, when Parse stopped there,
// one without a place that says so. Its Error prints one per line.
//
//nolint:errname // named as go/scanner.ErrorList, the standard library's list of one file's errors
type ErrorList []*Error

func (l ErrorList) Error() string {
	lines := make([]string, len(l))
	for i, e := range l {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// maxErrors is the most errors a file reports: one that is no flow at
// all could have one for each value in it.
const maxErrors = 100

// collector gathers the errors of one file, the first maxErrors of them.
type collector struct {
	file string
	errs ErrorList
}

func (c *collector) add(p Pos, format string, args ...any) {
	if c.full() {
		return
	}
	c.errs = append(c.errs, &Error{File: c.file, Pos: p, Msg: fmt.Sprintf(format, args...)})
}

// full reports whether the collector takes no more errors: a check whose
// cost grows with what it finds wrong stops then.
func (c *collector) full() bool { return len(c.errs) >= maxErrors }

// err returns the errors sorted by place, then, when there may be more,
// one that says so; or nil.
func (c *collector) err() error {
	if len(c.errs) == 0 {
		return nil
	}
	slices.SortStableFunc(c.errs, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.Pos.Line, b.Pos.Line), cmp.Compare(a.Pos.Col, b.Pos.Col))
	})
	if c.full() {
		return append(c.errs, &Error{File: c.file, Msg: fmt.Sprintf("stopped after %d errors: correct these first", maxErrors)})
	}
	return c.errs
}

// didYouMean suggests the one of want closest to got, if one is close:
// at most two edits away, and fewer than half of got's characters.
func didYouMean(got string, want []string) string {
	best, bestD := "", 3
	n := utf8.RuneCountInString(got)
	for _, w := range want {
		// The distance is at least the difference of the lengths: a
		// long name is compared with none.
		if abs(n-utf8.RuneCountInString(w)) >= bestD {
			continue
		}
		if d := distance(got, w); d < bestD {
			best, bestD = w, d
		}
	}
	if best == "" || bestD >= n || bestD > n/2 {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

// distance is the Levenshtein distance between a and b.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
