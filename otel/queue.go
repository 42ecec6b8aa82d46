package otel

import (
	"sync"
	"time"

	"reprise"
)

// The Tracer makes its spans off the engine's path. AttemptEnded and
// RunEnded queue what ended, with the time; the spans are made later, in
// batches, by a goroutine that a timer starts once the oldest end queued
// has waited flushDelay, or at once when a batch is full. An engine's
// goroutine pays a copy under a lock; the SDK's work for each span (start,
// attributes, end, the batch processor's queue) and the wake-up of the
// processor's goroutine are paid on the builder's goroutine, a batch at a
// time, on a core the engine does not wait on if there is one.
//
// The queue is bounded: an end that finds it full is dropped and counted
// (Tracer.Dropped), so that a builder that falls behind never holds the
// engine up. ForceFlush and Shutdown make what is queued.
const (
	batchSize  = 512 // ends that start a build at once
	maxQueued  = 8192
	flushDelay = 100 * time.Millisecond
)

// An end is an attempt's or a run's end, queued to be made its spans.
type end struct {
	at      time.Time // when the engine reported it: the spans' end
	isRun   bool
	attempt reprise.AttemptEnd
	run     reprise.RunEnd
}

// A queue holds ends until they are made spans.
type queue struct {
	mu      sync.Mutex
	ends    []end
	spare   []end       // the slice the last build emptied, for the next ends
	timer   *time.Timer // starts a build; made with the first end
	closed  bool
	dropped int64
}

// push queues e, or drops it when the queue is full or closed, and asks
// for a build when e is the first end waiting or fills a batch.
func (t *Tracer) push(e *end) {
	q := &t.queue
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.closed:
		return
	case len(q.ends) >= maxQueued:
		q.dropped++
		return
	}
	if q.ends == nil {
		q.ends, q.spare = q.spare, nil
	}
	q.ends = append(q.ends, *e)
	switch n := len(q.ends); {
	case n == 1 && q.timer == nil:
		q.timer = time.AfterFunc(flushDelay, t.flush)
	case n == 1:
		q.timer.Reset(flushDelay)
	case n == batchSize:
		q.timer.Reset(0)
	}
}

// flush makes the spans of the ends queued. One build at a time: the
// builder's buffers are reused from span to span.
func (t *Tracer) flush() {
	t.building.Lock()
	defer t.building.Unlock()
	q := &t.queue
	q.mu.Lock()
	ends := q.ends
	q.ends = nil
	q.mu.Unlock()
	if len(ends) == 0 {
		return
	}
	for i := range ends {
		if ends[i].isRun {
			t.b.runEnded(&ends[i].run, ends[i].at)
		} else {
			t.b.attemptEnded(&ends[i].attempt, ends[i].at)
		}
	}
	clear(ends) // keeps no strings alive
	q.mu.Lock()
	if q.spare == nil || cap(q.spare) < cap(ends) {
		q.spare = ends[:0]
	}
	q.mu.Unlock()
}

// close drops the ends that come from now on and stops the timer; what
// was queued is still to be flushed.
func (q *queue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	if q.timer != nil {
		q.timer.Stop()
	}
}
