package redact

import (
	"bytes"
	"encoding/json"

	"github.com/go-json-experiment/json/jsontext"

	"reprise/store"
)

// JSON returns doc with each of its strings, object keys included, as
// String gives it: a secret in a string reads xxxxx, and the document
// stays the same JSON but for those strings. Each string is unquoted
// before String reads it and quoted again after, so that an escape
// (\/, \u0040, \") neither hides a secret nor is broken by a mask, as it
// could be by String on the JSON text. A document with nothing to mask
// is returned as it is; one that is not JSON is read as text, by String.
func JSON(doc json.RawMessage) json.RawMessage {
	// A secret needs an "@" (userinfo) or an "=" (key=value), written as
	// they are or as a \u escape.
	if !bytes.ContainsAny(doc, `@=\`) {
		return doc
	}
	if !json.Valid(doc) {
		return json.RawMessage(String(string(doc)))
	}
	var out []byte // nil while nothing is masked
	last := 0
	for i := 0; i < len(doc); i++ {
		if doc[i] != '"' {
			continue
		}
		start := i
		i = stringEnd(doc, start) - 1
		lit := doc[start : i+1]
		if !bytes.ContainsAny(lit, `@=\`) {
			continue
		}
		// An error is for invalid UTF-8, which s has as U+FFFD: json.Valid
		// lets it pass, as encoding/json does.
		s, _ := jsontext.AppendUnquote(nil, lit)
		shown := String(string(s))
		if shown == string(s) {
			continue
		}
		out = append(out, doc[last:start]...)
		out, _ = jsontext.AppendQuote(out, shown) // valid UTF-8: AppendUnquote made it so
		last = i + 1
	}
	if out == nil {
		return doc
	}
	return append(out, doc[last:]...)
}

// stringEnd returns the index just past the JSON string literal that
// starts at doc[start], a '"'.
func stringEnd(doc []byte, start int) int {
	for i := start + 1; i < len(doc); i++ {
		switch doc[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(doc)
}

// Run returns a copy of run as a reader sees it: its input and output as
// JSON gives them, its error's message and stack as String does. run is
// unchanged: the engine and the store keep the payloads as they are.
func Run(run *store.Run) *store.Run {
	if run == nil {
		return nil
	}
	shown := *run
	shown.Input = JSON(run.Input)
	shown.Output = JSON(run.Output)
	shown.Error = errorInfo(run.Error)
	return &shown
}

// Runs returns runs as Run gives each; runs are unchanged.
func Runs(runs []*store.Run) []*store.Run {
	if runs == nil {
		return nil
	}
	shown := make([]*store.Run, len(runs))
	for i, run := range runs {
		shown[i] = Run(run)
	}
	return shown
}

// Events returns copies of events as a reader sees them: each one's input
// (a run's, a step's, a signal's payload) and output as JSON gives them,
// its error's message and stack and its reason (a cancellation's, given
// by whoever cancelled) as String does. events are unchanged.
func Events(events []store.Event) []store.Event {
	if events == nil {
		return nil
	}
	shown := make([]store.Event, len(events))
	for i, ev := range events {
		ev.Input = JSON(ev.Input)
		ev.Output = JSON(ev.Output)
		ev.Error = errorInfo(ev.Error)
		ev.Reason = String(ev.Reason)
		shown[i] = ev
	}
	return shown
}

// errorInfo returns a copy of e with its message and stack as String
// gives them.
func errorInfo(e *store.ErrorInfo) *store.ErrorInfo {
	if e == nil {
		return nil
	}
	shown := *e
	shown.Message = String(e.Message)
	shown.Stack = String(e.Stack)
	return &shown
}
