package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"reprise/internal/eventrow"
	"reprise/store"
)

// HistoryList returns a run's events with Seq > p.AfterSeq, in order.
func (s *Store) HistoryList(ctx context.Context, p *store.HistoryListParams) ([]store.Event, error) {
	var events []store.Event
	err := s.read(ctx, func(tx *txn) error {
		var one int
		err := tx.queryRow(`SELECT 1 FROM runs WHERE id = ?`, p.RunID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
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

func listEvents(tx *txn, runID string, afterSeq int64) ([]store.Event, error) {
	rows, err := tx.query(`
		SELECT seq, execution, at, body FROM events
		WHERE run_id = ? AND seq > ? ORDER BY seq`, runID, afterSeq)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var events []store.Event
	for rows.Next() {
		if events, err = scanEvents(rows, events, afterSeq); err != nil {
			return nil, err
		}
	}
	return events, rows.Err()
}

// scanEvents appends the events of the row of (seq, execution, at, body)
// at hand whose Seq is after afterSeq (see package eventrow).
func scanEvents(rows *rows, dst []store.Event, afterSeq int64) ([]store.Event, error) {
	var seq, at int64
	var execution int
	var body []byte
	if err := rows.Scan(&seq, &execution, &at, &body); err != nil {
		return nil, err
	}
	return eventrow.Decode(dst, seq, execution, fromNanos(at), body, afterSeq)
}

// lastSeq is a scalar subquery for the last Seq of the run ?1's history.
const lastSeq = `(SELECT coalesce(max(seq), 0) FROM events WHERE run_id = ?1)`

// appendEvents appends events to the run's history, numbering them after
// last, the run's last Seq, at the batch's time. It sets their Seq and At.
// bodies holds the events encoded ahead, off the write path; the others
// (a nil or missing body) are encoded here. The events go in as one row
// (package eventrow): a row costs SQLite about as much as its bytes,
// whatever the number of events in it.
func (tx *txn) appendEvents(runID string, last int64, events []store.Event, bodies [][]byte) error {
	if len(events) == 0 {
		return nil
	}
	enc := make([][]byte, len(events))
	for j := range events {
		events[j].Seq, events[j].At = last+int64(j)+1, tx.now
		if j < len(bodies) {
			enc[j] = bodies[j]
		}
		if enc[j] == nil {
			var err error
			if enc[j], err = eventrow.Body(events[j]); err != nil {
				return err
			}
		}
	}
	end := &events[len(events)-1]
	_, err := tx.exec(`INSERT INTO events (run_id, seq, execution, type, at, body) VALUES (?, ?, ?, ?, ?, ?)`,
		runID, end.Seq, end.Execution, string(end.Type), tx.nanos, eventrow.Join(events, enc))
	if err != nil {
		return fmt.Errorf("append %s: %w", events[0].Type, err)
	}
	return nil
}

// encodeEvents encodes ahead the events whose bodies depend on nothing the
// write learns: all but timers scheduled, whose fire time is the write's.
func encodeEvents(events []store.Event) ([][]byte, error) {
	bodies := make([][]byte, len(events))
	for i, e := range events {
		if e.Type == store.EventTimerScheduled {
			continue
		}
		var err error
		if bodies[i], err = eventrow.Body(e); err != nil {
			return nil, err
		}
	}
	return bodies, nil
}

// outcome appends events to the history of a run that a task or timer
// belongs to, and returns them with the run's lease owner.
func (tx *txn) outcome(runID string, events ...store.Event) (*store.Outcome, error) {
	var owner string
	var last int64
	if err := tx.queryRow(`SELECT owner, `+lastSeq+` FROM runs WHERE id = ?1`, runID).Scan(&owner, &last); err != nil {
		return nil, fmt.Errorf("run %s: %w", runID, err)
	}
	if err := tx.appendEvents(runID, last, events, nil); err != nil {
		return nil, err
	}
	return &store.Outcome{RunID: runID, Owner: owner, Events: events}, nil
}

// fromNanos converts a time column to a time.
func fromNanos(n int64) time.Time {
	return time.Unix(0, n).UTC()
}

// The times a time column holds: nanoseconds since 1970 in an int64.
var (
	minNanos = time.Unix(0, math.MinInt64)
	maxNanos = time.Unix(0, math.MaxInt64)
)

// toNanos converts a time a caller gives (a filter's bound, which may be
// any) to a time column's value, a time outside its range to its nearest
// end (UnixNano's is undefined there).
func toNanos(t time.Time) int64 {
	switch {
	case t.Before(minNanos):
		return math.MinInt64
	case t.After(maxNanos):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// blob gives a JSON document as a column value: NULL when empty.
func blob(m json.RawMessage) any {
	if len(m) == 0 {
		return nil
	}
	return []byte(m)
}

// errorBlob encodes an error for the runs table, NULL for none.
func errorBlob(e *store.ErrorInfo) (any, error) {
	if e == nil {
		return nil, nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode error: %w", err)
	}
	return b, nil
}
