package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"reprise"
)

// HistoryList returns a run's events with Seq > p.AfterSeq, in order.
func (s *Store) HistoryList(ctx context.Context, p *reprise.HistoryListParams) ([]reprise.Event, error) {
	var events []reprise.Event
	err := s.read(ctx, func(tx *txn) error {
		var one int
		err := tx.queryRow(`SELECT 1 FROM runs WHERE id = ?`, p.RunID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return reprise.ErrNotFound
		}
		if err != nil {
			return err
		}
		events, err = listEvents(tx, p.RunID, p.AfterSeq)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list history of run %s: %w", p.RunID, err)
	}
	return events, nil
}

func listEvents(tx *txn, runID string, afterSeq int64) ([]reprise.Event, error) {
	rows, err := tx.query(`
		SELECT seq, execution, at, body FROM events
		WHERE run_id = ? AND seq > ? ORDER BY seq`, runID, afterSeq)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var events []reprise.Event
	for rows.Next() {
		var seq, at int64
		var execution int
		var body []byte
		if err := rows.Scan(&seq, &execution, &at, &body); err != nil {
			return nil, err
		}
		var e reprise.Event
		if err := json.Unmarshal(body, &e); err != nil {
			return nil, fmt.Errorf("decode event %d: %w", seq, err)
		}
		e.Seq, e.Execution, e.At = seq, execution, fromNanos(at)
		events = append(events, e)
	}
	return events, rows.Err()
}

// lastSeq is a scalar subquery for the last Seq of the run ?1's history.
const lastSeq = `(SELECT coalesce(max(seq), 0) FROM events WHERE run_id = ?1)`

// appendEvents appends events to the run's history, numbering them after
// last, the run's last Seq, at the batch's time. It sets their Seq and At.
// bodies holds the events encoded ahead, off the write path; the others
// (a nil or missing body) are encoded here. The events go in as few
// statements as insertEventsSQL allows: SQLite's work per statement is a
// good part of an insert's.
func (tx *txn) appendEvents(runID string, last int64, events []reprise.Event, bodies [][]byte) error {
	args := make([]any, 0, 6*min(len(events), len(insertEventsSQL)))
	for i := 0; i < len(events); {
		n := min(len(events)-i, len(insertEventsSQL))
		args = args[:0]
		for j := i; j < i+n; j++ {
			e := &events[j]
			e.Seq, e.At = last+int64(j)+1, tx.now
			var body []byte
			if j < len(bodies) {
				body = bodies[j]
			}
			if body == nil {
				var err error
				if body, err = encodeEvent(*e); err != nil {
					return err
				}
			}
			args = append(args, runID, e.Seq, e.Execution, string(e.Type), tx.nanos, body)
		}
		if _, err := tx.exec(insertEventsSQL[n-1], args...); err != nil {
			return fmt.Errorf("append %s: %w", events[i].Type, err)
		}
		i += n
	}
	return nil
}

// insertEventsSQL[n-1] inserts n events.
var insertEventsSQL = func() []string {
	qs := make([]string, 8)
	q := `INSERT INTO events (run_id, seq, execution, type, at, body) VALUES (?, ?, ?, ?, ?, ?)`
	for i := range qs {
		if i > 0 {
			q += `, (?, ?, ?, ?, ?, ?)`
		}
		qs[i] = q
	}
	return qs
}()

// encodeEvents encodes ahead the events whose bodies depend on nothing the
// write learns: all but timers scheduled, whose fire time is the write's.
func encodeEvents(events []reprise.Event) ([][]byte, error) {
	bodies := make([][]byte, len(events))
	for i, e := range events {
		if e.Type == reprise.EventTimerScheduled {
			continue
		}
		var err error
		if bodies[i], err = encodeEvent(e); err != nil {
			return nil, err
		}
	}
	return bodies, nil
}

// outcome appends events to the history of a run that a task or timer
// belongs to, and returns them with the run's lease owner.
func (tx *txn) outcome(runID string, events ...reprise.Event) (*reprise.Outcome, error) {
	var owner string
	var last int64
	if err := tx.queryRow(`SELECT owner, `+lastSeq+` FROM runs WHERE id = ?1`, runID).Scan(&owner, &last); err != nil {
		return nil, fmt.Errorf("run %s: %w", runID, err)
	}
	if err := tx.appendEvents(runID, last, events, nil); err != nil {
		return nil, err
	}
	return &reprise.Outcome{RunID: runID, Owner: owner, Events: events}, nil
}

// encodeEvent returns the event's body: its JSON without seq, at and
// execution, which the events table keeps in columns. Decoding the body
// and setting those three gives the event back.
func encodeEvent(e reprise.Event) ([]byte, error) {
	e.Seq, e.At, e.Execution = 0, time.Time{}, 0
	b, err := e.AppendJSON(make([]byte, 0, 128))
	if err != nil {
		return nil, fmt.Errorf("encode %s event: %w", e.Type, err)
	}
	return b, nil
}

// fromNanos converts a time column to a time.
func fromNanos(n int64) time.Time {
	return time.Unix(0, n).UTC()
}

// blob gives a JSON document as a column value: NULL when empty.
func blob(m json.RawMessage) any {
	if len(m) == 0 {
		return nil
	}
	return []byte(m)
}

// errorBlob encodes an error for the runs table, NULL for none.
func errorBlob(e *reprise.ErrorInfo) (any, error) {
	if e == nil {
		return nil, nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode error: %w", err)
	}
	return b, nil
}
