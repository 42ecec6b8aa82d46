package webui

import (
	"context"

	"reprise"
	"reprise/internal/redact"
	"reprise/store"
)

// The page reads runs and histories through these, which show their
// payloads and errors as package redact does: a run's input may hold a
// flow's URLs, whose credentials the page does not show. New wraps
// Config.Engine and Config.Store in them, so that no page reads around
// them.
type (
	shownEngine struct{ Engine }
	shownStore  struct{ Store }
)

func (e shownEngine) GetRun(ctx context.Context, id string) (*reprise.Run, error) {
	run, err := e.Engine.GetRun(ctx, id)
	return redact.Run(run), err
}

func (e shownEngine) History(ctx context.Context, id string) ([]reprise.Event, error) {
	events, err := e.Engine.History(ctx, id)
	return redact.Events(events), err
}

func (s shownStore) RunList(ctx context.Context, p *store.RunListParams) ([]*store.Run, error) {
	runs, err := s.Store.RunList(ctx, p)
	return redact.Runs(runs), err
}

func (s shownStore) HistoryList(ctx context.Context, p *store.HistoryListParams) ([]store.Event, error) {
	events, err := s.Store.HistoryList(ctx, p)
	return redact.Events(events), err
}
