package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"reprise"
	"reprise/sqlite"
	"reprise/store"
)

// TestHistoryOlderForm opens a database whose histories hold events of the
// older form, written raw as the store wrote them before the events' shared
// fields were split: a signal's name and a marker's change id in step, who
// redrove a run and a child's status in reason. HistoryList gives each in
// the field of its own, from rows of one event and of several alike, and an
// engine replays such a run as it ran: the recorded version and the signal
// are found.
func TestHistoryOlderForm(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "reprise.db")
	s, err := sqlite.Open(t.Context(), path, &sqlite.Options{Synchronous: "OFF"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.RunCreate(t.Context(), &store.RunCreateParams{ID: "waits", Workflow: "approval", Input: json.RawMessage(`"A-1"`)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		// A run that took version 2 of new-tax and then got its signal.
		`INSERT INTO events (run_id, seq, execution, type, at, body)
			SELECT run_id, 2, 1, 'VersionMarker', at, '{"type":"VersionMarker","position":1,"step":"new-tax","version":2}'
			FROM events WHERE run_id = 'waits' AND seq = 1`,
		`INSERT INTO events (run_id, seq, execution, type, at, body)
			SELECT run_id, 3, 1, 'SignalReceived', at, '{"type":"SignalReceived","step":"approve","input":"alice"}'
			FROM events WHERE run_id = 'waits' AND seq = 1`,
		// A failed run, with a child's end and a redrive in one row.
		`INSERT INTO runs (id, workflow, status, input, created_at) VALUES ('ended', 'order', 'failed', '{}', 1)`,
		`INSERT INTO events (run_id, seq, execution, type, at, body) VALUES
			('ended', 1, 1, 'RunStarted', ` + itoa(at.UnixNano()) + `, '{"type":"RunStarted","workflow":"order","input":{}}'),
			('ended', 3, 1, 'RunRedriven', ` + itoa(at.UnixNano()) + `, '[{"type":"ChildFailed","position":2,"reason":"cancelled","child":"ended/2"},{"type":"RunRedriven","position":1,"step":"charge","reason":"alice"}]')`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%.40s: %v", q, err)
		}
	}
	db.Close()

	s = open(t, path, nil)
	events, err := s.HistoryList(t.Context(), &store.HistoryListParams{RunID: "ended"})
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Event{
		{Seq: 1, Type: store.EventRunStarted, At: at, Execution: 1, Workflow: "order", Input: json.RawMessage(`{}`)},
		{Seq: 2, Type: store.EventChildFailed, At: at, Execution: 1, Position: 2, Child: "ended/2", ChildStatus: store.RunCancelled},
		{Seq: 3, Type: store.EventRunRedriven, At: at, Execution: 1, Position: 1, Step: "charge", By: "alice"},
	}
	if !reflect.DeepEqual(events, want) {
		t.Errorf("history of ended:\n got %+v\nwant %+v", events, want)
	}
	events, err = s.HistoryList(t.Context(), &store.HistoryListParams{RunID: "waits", AfterSeq: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 || events[0].Change != "new-tax" || events[0].Step != "" ||
		events[1].Signal != "approve" || events[1].Step != "" {
		t.Errorf("history of waits after its start: %+v", events)
	}

	approval := reprise.NewWorkflow("approval", func(ctx context.Context, order string) (string, error) {
		v := reprise.Version(ctx, "new-tax", reprise.DefaultVersion, 2)
		by, err := reprise.WaitSignal[string](ctx, "approve").Get(ctx)
		if err != nil {
			return "", err
		}
		return order + " v" + itoa(int64(v)) + " approved by " + by, nil
	})
	e, err := reprise.New(reprise.Config{Store: s, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(approval); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("engine: %v", err)
		}
	}()
	// A history the engine misread would fail the run (a marker of
	// another change) or leave it waiting for the signal: a bound on the
	// wait says so instead of the test's timeout.
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	run, err := e.WaitRun(wctx, "waits")
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != store.RunCompleted || string(run.Output) != `"A-1 v2 approved by alice"` {
		t.Errorf("replayed run: %s, output %s, error %+v", run.Status, run.Output, run.Error)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
