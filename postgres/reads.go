package postgres

import (
	"context"
	"fmt"
	"time"

	"reprise/internal/eventrow"
	"reprise/store"
)

// Reading histories together. An engine reads the history of each run it
// waits on whenever the run may have moved, so HistoryList is the store's
// most frequent call: most of those reads find nothing new, and each cost
// the server a statement. The reads that arrive while others are running
// wait, as transitions do for their group (pgtx.Batcher), and the next free
// reader runs all of them as one statement. A read alone is run at once,
// and on the plain path (Options.Plain) every read is.

// maxReaders is how many history statements run at once, maxReads how
// many reads one serves at most, and readTimeout bounds a statement that
// serves several callers (none of their contexts may cancel it).
const (
	maxReaders  = 2
	maxReads    = 128
	readTimeout = time.Minute
)

// A historyRead is one HistoryList call.
type historyRead struct {
	p      *store.HistoryListParams
	events []store.Event
	err    error
}

// readHistory returns the events of p's run after p.AfterSeq, in order,
// and ErrNotFound for no run.
func (s *Store) readHistory(ctx context.Context, p *store.HistoryListParams) ([]store.Event, error) {
	r := &historyRead{p: p}
	if s.reads == nil {
		s.histories(ctx, []*historyRead{r})
		return r.events, r.err
	}
	err := s.reads.Do(ctx, r, func(reads []*historyRead) {
		// No caller's context may cancel the others' reads; a server that
		// stops answering still ends them.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
		defer cancel()
		s.histories(ctx, reads)
	})
	if err != nil {
		return nil, err
	}
	return r.events, r.err
}

// histories reads the histories of reads in one statement and sets each
// read's events or error. Each run is looked up by key in a lateral
// subquery (OFFSET 0 keeps it from being flattened into a join, which a
// plan made on a small table would serve by scanning it).
func (s *Store) histories(ctx context.Context, reads []*historyRead) {
	ids := make([]string, len(reads))
	after := make([]int64, len(reads))
	for i, r := range reads {
		ids[i], after[i] = r.p.RunID, r.p.AfterSeq
		r.events = []store.Event{}
	}
	fail := func(err error) {
		for _, r := range reads {
			r.events, r.err = nil, fmt.Errorf("list history: %w", err)
		}
	}
	rows, err := s.pool.Query(ctx, `
		SELECT q.i, coalesce(x.seq, 0), coalesce(x.execution, 0), coalesce(x.at, 'epoch'), x.data
		FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS q(id, after, i)
		CROSS JOIN LATERAL (
			SELECT e.seq, e.execution, e.at, e.data FROM reprise_run r
			LEFT JOIN LATERAL (
				SELECT seq, execution, at, data FROM reprise_event
				WHERE run_id = r.id AND seq > q.after AND r.last_seq > q.after
				ORDER BY seq) e ON true
			WHERE r.id = q.id
			OFFSET 0) x
		ORDER BY q.i, x.seq`,
		ids, after)
	if err != nil {
		fail(err)
		return
	}
	found := make([]bool, len(reads))
	for rows.Next() {
		var (
			i, seq    int64
			execution int
			at        time.Time
			data      []byte
		)
		if err := rows.Scan(&i, &seq, &execution, &at, &data); err != nil {
			rows.Close()
			fail(err)
			return
		}
		if i < 1 || int(i) > len(reads) {
			rows.Close()
			fail(fmt.Errorf("row of read %d of %d", i, len(reads)))
			return
		}
		found[i-1] = true
		if data == nil {
			continue // the run, with nothing to read
		}
		r := reads[i-1]
		if r.err != nil {
			continue
		}
		events, err := eventrow.Decode(r.events, seq, execution, at.UTC(), data, r.p.AfterSeq)
		if err != nil {
			r.events, r.err = nil, fmt.Errorf("list history: %w", err)
			continue
		}
		r.events = events
	}
	if err := rows.Err(); err != nil {
		fail(err)
		return
	}
	for i, r := range reads {
		if !found[i] && r.err == nil {
			r.events, r.err = nil, fmt.Errorf("list history of run %q: %w", r.p.RunID, store.ErrNotFound)
		}
	}
}
