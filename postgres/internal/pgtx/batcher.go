package pgtx

import (
	"context"
	"slices"
	"sync"
)

// A Batcher serves the calls that arrive together in batches, with no
// goroutine of its own: transitions in groups (Committer), a store's
// history reads in one statement. A caller that finds fewer than leaders
// batches being served leads one: it takes every queued call (up to size,
// its own among them), serves them, wakes their callers, and hands the lead
// to the oldest call queued meanwhile. The others wait in the queue.
type Batcher[T any] struct {
	leaders int // batches served at once
	size    int // calls a batch serves at most

	mu      sync.Mutex
	queue   []*queued[T]
	leading int
}

// NewBatcher returns a batcher that serves up to leaders batches at once, of
// up to size calls each.
func NewBatcher[T any](leaders, size int) *Batcher[T] {
	return &Batcher[T]{leaders: leaders, size: size}
}

// A queued is one call waiting in a Batcher.
type queued[T any] struct {
	item   T
	wake   chan bool // true: lead the next batch; false: served
	leader bool      // leads, or was handed the lead; may no longer leave the queue
}

// Do queues item and returns once a batch served it: serve is called with
// the items of each batch that this caller leads. If ctx ends while the
// call waits, do returns the context's error and item is never served.
func (q *Batcher[T]) Do(ctx context.Context, item T, serve func([]T)) error {
	w := &queued[T]{item: item, wake: make(chan bool, 1)}
	q.mu.Lock()
	q.queue = append(q.queue, w)
	lead := q.leading < q.leaders
	if lead {
		q.leading++
		w.leader = true
	}
	q.mu.Unlock()

	if !lead {
		select {
		case lead = <-w.wake:
		case <-ctx.Done():
			if q.leave(w) {
				return context.Cause(ctx)
			}
			lead = <-w.wake
		}
		if !lead {
			return nil
		}
	}
	q.lead(serve)
	<-w.wake
	return nil
}

// leave takes a waiting call out of the queue, unless a leader took it or
// it was handed the lead.
func (q *Batcher[T]) leave(w *queued[T]) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	i := slices.Index(q.queue, w)
	if i < 0 || w.leader {
		return false
	}
	q.queue = slices.Delete(q.queue, i, i+1)
	return true
}

// lead serves one batch: the queued calls, up to size (none, if another
// leader took them). Then it hands the lead to the oldest call still
// queued that was not handed it yet, or gives it up.
func (q *Batcher[T]) lead(serve func([]T)) {
	q.mu.Lock()
	n := min(len(q.queue), q.size)
	batch := q.queue[:n]
	q.queue = slices.Clone(q.queue[n:])
	q.mu.Unlock()

	if len(batch) > 0 {
		items := make([]T, len(batch))
		for i, w := range batch {
			items[i] = w.item
		}
		serve(items)
		for _, w := range batch {
			w.wake <- false
		}
	}

	q.mu.Lock()
	defer q.mu.Unlock()
	for _, next := range q.queue {
		// With several leaders, a call may have been handed the lead by
		// another and not taken it up yet.
		if !next.leader {
			next.leader = true
			next.wake <- true
			return
		}
	}
	q.leading--
}

// Len returns how many calls wait for a batch.
func (q *Batcher[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue)
}
