// Package runid reads the id of a run as a path or a cursor names it:
// a run's own id, or a child run's, which holds slashes.
package runid

import (
	"fmt"
	"slices"
	"strings"

	"reprise"
)

// MaxLen bounds the id of a child run, which has its parent's (up to 200
// characters) and a place for each generation.
const MaxLen = 1000

// Check reports whether id can name a run: a run id
// (reprise.ValidateRunID), then, for a child run, /N or /eN/N (in its
// parent's N-th execution, after a continue-as-new) for each generation:
// order-1, order-1/2, order-1/e2/3, order-1/2/4.
func Check(id string) error {
	segs := strings.Split(id, "/")
	if err := reprise.ValidateRunID(segs[0]); err != nil {
		return err
	}
	if len(id) > MaxLen {
		return fmt.Errorf("run id has %d characters, more than a child run's id can", len(id))
	}
	for _, seg := range segs[1:] {
		digits := strings.TrimPrefix(seg, "e")
		if digits == "" || strings.Trim(digits, "0123456789") != "" {
			return fmt.Errorf("%q is not a child run's place (a child run's id is its parent's, then /N or /eN/N)", seg)
		}
	}
	return nil
}

// Split splits a path that names a run, written with a child run's
// slashes as they are (order-1/2/cancel), into the run's id and the
// action after it, if its last segment is one of actions. No action can
// be mistaken for a child run's place, which is a number.
func Split(path string, actions ...string) (id, action string) {
	i := strings.LastIndexByte(path, '/')
	if i >= 0 && slices.Contains(actions, path[i+1:]) {
		return path[:i], path[i+1:]
	}
	return path, ""
}
