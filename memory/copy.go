package memory

import (
	"encoding/json"
	"fmt"
	"slices"

	"reprise/store"
)

// The store keeps its own copy of everything a caller gives it, and gives
// out copies of what it keeps: no caller can change a record by holding
// on to a slice or a pointer, on either side.

func cloneJSON(m json.RawMessage) json.RawMessage {
	if len(m) == 0 {
		return nil // an empty document is none, as a NULL column is
	}
	return slices.Clone(m)
}

func cloneError(e *store.ErrorInfo) *store.ErrorInfo {
	if e == nil {
		return nil
	}
	c := *e
	return &c
}

func cloneEvent(e store.Event) store.Event {
	e.Input, e.Output, e.Error = cloneJSON(e.Input), cloneJSON(e.Output), cloneError(e.Error)
	return e
}

func cloneEvents(events []store.Event) []store.Event {
	out := make([]store.Event, len(events))
	for i, e := range events {
		out[i] = cloneEvent(e)
	}
	return out
}

// checkJSON requires each document to be valid JSON, or none (empty). The
// stores on a database refuse other documents (postgres keeps them as
// json), so the reference refuses them too, before it changes anything.
func checkJSON(what string, docs ...json.RawMessage) error {
	for _, d := range docs {
		if len(d) > 0 && !json.Valid(d) {
			return fmt.Errorf("%s: not a JSON document: %.40q", what, d)
		}
	}
	return nil
}
