package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"

	"reprise/internal/redact"
	"reprise/store"
)

// redactHandler is a slog.Handler that redacts every message and every
// attribute's value before its handler sees them.
type redactHandler struct{ slog.Handler }

func (h redactHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, redact.String(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(redactAttr(a))
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h redactHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		clean[i] = redactAttr(a)
	}
	return redactHandler{h.Handler.WithAttrs(clean)}
}

func (h redactHandler) WithGroup(name string) slog.Handler {
	return redactHandler{h.Handler.WithGroup(name)}
}

// redactAttr redacts an attribute's value as text: strings, errors,
// Stringers and whatever else a handler would print.
func redactAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, redact.String(v.String()))
	case slog.KindGroup:
		group := v.Group()
		clean := make([]any, len(group))
		for i, g := range group {
			clean[i] = redactAttr(g)
		}
		return slog.Group(a.Key, clean...)
	case slog.KindAny:
		return slog.String(a.Key, redact.String(fmt.Sprint(v.Any())))
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// shownBackend is how the commands read the runs they print: with their
// payloads and errors as package redact shows them, from a database as
// from a server (whose answers are redacted already: redacting again
// changes nothing).
type shownBackend struct{ runsBackend }

func (b shownBackend) StartRun(ctx context.Context, workflow string, input json.RawMessage, id string) (*store.Run, bool, error) {
	run, created, err := b.runsBackend.StartRun(ctx, workflow, input, id)
	return redact.Run(run), created, err
}

func (b shownBackend) ListRuns(ctx context.Context, p *store.RunListParams) ([]*store.Run, error) {
	runs, err := b.runsBackend.ListRuns(ctx, p)
	return redact.Runs(runs), err
}

func (b shownBackend) GetRun(ctx context.Context, id string) (*store.Run, error) {
	run, err := b.runsBackend.GetRun(ctx, id)
	return redact.Run(run), err
}

func (b shownBackend) History(ctx context.Context, id string) ([]store.Event, error) {
	events, err := b.runsBackend.History(ctx, id)
	return redact.Events(events), err
}

// redactWriter redacts what a command writes to standard error: its
// messages quote the URLs, DSNs and errors they are given (a --server URL
// with a password, a url.Error that keeps a token in its query). Each
// message is written whole, in one Write.
type redactWriter struct{ w io.Writer }

func (r redactWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(r.w, redact.String(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
