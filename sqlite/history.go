package sqlite

import (
	"bytes"
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
	err := s.read(ctx, func(q querier, _ time.Time) error {
		var one int
		err := q.QueryRowContext(ctx, `SELECT 1 FROM runs WHERE id = ?`, p.RunID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return reprise.ErrNotFound
		}
		if err != nil {
			return err
		}
		events, err = listEvents(ctx, q, p.RunID, p.AfterSeq)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list history of run %s: %w", p.RunID, err)
	}
	return events, nil
}

func listEvents(ctx context.Context, q querier, runID string, afterSeq int64) ([]reprise.Event, error) {
	rows, err := q.QueryContext(ctx, `
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

const appendEventSQL = `
	INSERT INTO events (run_id, seq, execution, type, at, body)
	VALUES (?1, (SELECT coalesce(max(seq), 0) + 1 FROM events WHERE run_id = ?1), ?2, ?3, ?4, ?5)
	RETURNING seq`

// appendEvent appends e to the run's history at the batch's time, and sets
// its Seq and At.
func (tx *wtx) appendEvent(runID string, e *reprise.Event) error {
	e.At = tx.now
	body, err := encodeEvent(*e)
	if err != nil {
		return err
	}
	err = tx.QueryRowContext(tx.ctx, appendEventSQL, runID, e.Execution, string(e.Type), tx.nanos, body).Scan(&e.Seq)
	if err != nil {
		return fmt.Errorf("append %s: %w", e.Type, err)
	}
	return nil
}

// runOwner returns who holds the run's lease, "" for none.
func (tx *wtx) runOwner(runID string) (string, error) {
	var owner string
	if err := tx.QueryRowContext(tx.ctx, `SELECT owner FROM runs WHERE id = ?`, runID).Scan(&owner); err != nil {
		return "", fmt.Errorf("run owner: %w", err)
	}
	return owner, nil
}

// The fields of an event's JSON that are columns instead, as the encoder
// writes them when zero.
var (
	zeroSeq = []byte(`{"seq":0,`)
	zeroAt  = []byte(`,"at":"0001-01-01T00:00:00Z"`)
)

// encodeEvent returns the event's body: its JSON without seq, at and
// execution, which the events table keeps in columns. Decoding the body
// and setting those three gives the event back.
func encodeEvent(e reprise.Event) ([]byte, error) {
	e.Seq, e.At, e.Execution = 0, time.Time{}, 0
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode %s event: %w", e.Type, err)
	}
	// Seq and At come first and third, before any field that could hold
	// their text; if the encoder ever changes that, they stay in the body,
	// and decoding overwrites them anyway.
	if bytes.HasPrefix(b, zeroSeq) {
		b = append(b[:1], b[len(zeroSeq):]...)
		if i := bytes.Index(b, zeroAt); i >= 0 {
			b = append(b[:i], b[i+len(zeroAt):]...)
		}
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
