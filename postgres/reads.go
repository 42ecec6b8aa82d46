package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"reprise"
)

// Reading histories together. An engine reads the history of each run it
// waits on whenever the run may have moved, so HistoryList is the store's
// most frequent call: most of those reads find nothing new, and each cost
// the server a statement. The reads that arrive while others are running
// wait, as transitions do for their group (commit.go), and the next
// free reader runs all of them as one statement. There is no goroutine of
// its own: the caller that finds a reader free leads, and hands the lead to
// the oldest waiting caller when done. A read alone is run at once.

// maxReaders is how many history statements run at once, and maxReads how
// many reads one serves at most.
const (
	maxReaders = 2
	maxReads   = 128
)

// historyReads is the queue of history reads that wait for a reader.
type historyReads struct {
	mu      sync.Mutex
	queue   []*historyRead
	leaders int
}

// A historyRead is one HistoryList call.
type historyRead struct {
	p      *reprise.HistoryListParams
	events []reprise.Event
	err    error
	wake   chan bool // true: lead the next statement; false: done
	leader bool
}

// readHistory returns the events of p's run after p.AfterSeq, in order,
// and ErrNotFound for no run.
func (s *Store) readHistory(ctx context.Context, p *reprise.HistoryListParams) ([]reprise.Event, error) {
	h := &s.reads
	r := &historyRead{p: p, wake: make(chan bool, 1)}
	h.mu.Lock()
	h.queue = append(h.queue, r)
	lead := h.leaders < maxReaders
	if lead {
		h.leaders++
		r.leader = true
	}
	h.mu.Unlock()
	if !lead {
		select {
		case lead = <-r.wake:
		case <-ctx.Done():
			h.mu.Lock()
			i := slices.Index(h.queue, r)
			if i >= 0 && !r.leader {
				h.queue = slices.Delete(h.queue, i, i+1)
				h.mu.Unlock()
				return nil, context.Cause(ctx)
			}
			h.mu.Unlock()
			lead = <-r.wake
		}
		if !lead {
			return r.events, r.err
		}
	}
	s.leadReads(ctx)
	<-r.wake
	return r.events, r.err
}

// leadReads runs the queued reads, up to maxReads, as one statement and
// wakes their callers; then hands the lead to the oldest read still
// queued, or gives it up. ctx is the leader's.
func (s *Store) leadReads(ctx context.Context) {
	h := &s.reads
	h.mu.Lock()
	n := min(len(h.queue), maxReads)
	reads := h.queue[:n]
	h.queue = slices.Clone(h.queue[n:])
	h.mu.Unlock()

	if len(reads) > 0 {
		// No caller's context may cancel the others' reads; a server that
		// stops answering still ends them.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), groupTimeout)
		s.histories(ctx, reads)
		cancel()
		for _, r := range reads {
			r.wake <- false
		}
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	for _, next := range h.queue {
		if !next.leader {
			next.leader = true
			next.wake <- true
			return
		}
	}
	h.leaders--
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
		r.events = []reprise.Event{}
	}
	fail := func(err error) {
		for _, r := range reads {
			r.events, r.err = nil, fmt.Errorf("list history: %w", err)
		}
	}
	rows, err := s.pool.Query(ctx, `
		SELECT q.i, x.data FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS q(id, after, i)
		CROSS JOIN LATERAL (
			SELECT e.seq, e.data FROM reprise_run r
			LEFT JOIN LATERAL (
				SELECT seq, data FROM reprise_event
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
			i    int64
			data []byte
		)
		if err := rows.Scan(&i, &data); err != nil {
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
		var e reprise.Event
		if err := json.Unmarshal(data, &e); err != nil {
			r.events, r.err = nil, fmt.Errorf("list history: %w", err)
			continue
		}
		r.events = append(r.events, e)
	}
	if err := rows.Err(); err != nil {
		fail(err)
		return
	}
	for i, r := range reads {
		if !found[i] && r.err == nil {
			r.events, r.err = nil, fmt.Errorf("list history of run %q: %w", r.p.RunID, reprise.ErrNotFound)
		}
	}
}
