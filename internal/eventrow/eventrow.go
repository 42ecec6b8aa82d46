// Package eventrow is how the stores keep a run's history: the events one
// write appends to a run go in as one row.
//
// A store's work per row (its key, its index entries, its columns) is most
// of what an append costs, and a write often appends several events to one
// run (a step scheduled and its first attempt started; an attempt failed and
// the next one started). A row has the columns seq, execution and at and a
// body. Its seq is its last event's, so that the last seq of a run is still
// its greatest, and a read after a seq starts at the right row. Its body is
// its one event's JSON without seq, at and execution, which the columns
// hold, or a JSON array of its events so encoded, numbered up to the row's
// seq, each of the row's execution unless it names another (a run continued
// as new), all at the row's time. Rows of the older layout, one event each
// whose JSON may hold seq, at and execution too, decode the same.
package eventrow

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"reprise/store"
)

// Body returns the body of a row of e alone: its JSON without seq, at and
// execution.
func Body(e store.Event) ([]byte, error) {
	e.Seq, e.At, e.Execution = 0, time.Time{}, 0
	b, err := e.AppendJSON(make([]byte, 0, 256))
	if err != nil {
		return nil, fmt.Errorf("encode %s event: %w", e.Type, err)
	}
	return b, nil
}

// Join returns the body of a row of events, whose bodies (from Body) are
// bodies, in order. The row's execution is the last event's.
func Join(events []store.Event, bodies [][]byte) []byte {
	if len(bodies) == 1 {
		return bodies[0]
	}
	size := 2
	for _, b := range bodies {
		size += len(b) + 16
	}
	row := make([]byte, 0, size)
	row = append(row, '[')
	execution := events[len(events)-1].Execution
	for i, e := range events {
		if i > 0 {
			row = append(row, ',')
		}
		if e.Execution == execution {
			row = append(row, bodies[i]...)
			continue
		}
		row = strconv.AppendInt(append(row, `{"execution":`...), int64(e.Execution), 10)
		row = append(append(row, ','), bodies[i][1:]...)
	}
	return append(row, ']')
}

// Decode appends to dst the events of the row (seq, execution, at, body)
// whose Seq is after afterSeq.
func Decode(dst []store.Event, seq int64, execution int, at time.Time, body []byte, afterSeq int64) ([]store.Event, error) {
	if len(body) > 0 && body[0] == '[' {
		var events []store.Event
		if err := json.Unmarshal(body, &events); err != nil {
			return nil, fmt.Errorf("decode events up to %d: %w", seq, err)
		}
		first := seq - int64(len(events)) + 1
		for i, e := range events {
			e.Seq, e.At = first+int64(i), at
			if e.Execution == 0 {
				e.Execution = execution
			}
			if e.Seq > afterSeq {
				dst = append(dst, e)
			}
		}
		return dst, nil
	}
	if seq <= afterSeq {
		return dst, nil
	}
	var e store.Event
	if err := json.Unmarshal(body, &e); err != nil {
		return nil, fmt.Errorf("decode event %d: %w", seq, err)
	}
	e.Seq, e.Execution, e.At = seq, execution, at
	return append(dst, e), nil
}
