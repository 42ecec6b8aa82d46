package reprisetest

import (
	"context"
	"sync"

	"reprise"
	"reprise/store"
)

// A watcher is the Observer an Env's clock watches its engine with: it
// keeps whether the engine is busy, how many attempts were inside step
// code when it went idle, and how many events it heard, which grows with
// every step of progress. It passes every event on to next: the test's
// own Observer, or a NopObserver.
type watcher struct {
	next reprise.Observer

	mu     sync.Mutex
	busy   bool
	steps  int
	events int64
}

// state returns what the engine last said: whether it is busy, the
// attempts in step code as it went idle, and the count of its events.
func (w *watcher) state() (busy bool, steps int, progress int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.busy, w.steps, w.events
}

// heard counts an event.
func (w *watcher) heard() {
	w.mu.Lock()
	w.events++
	w.mu.Unlock()
}

func (w *watcher) AttemptStarted(a reprise.AttemptInfo) {
	w.heard()
	w.next.AttemptStarted(a)
}

func (w *watcher) AttemptEnded(a reprise.AttemptEnd) {
	w.heard()
	w.next.AttemptEnded(a)
}

func (w *watcher) LeaseLapsed(a reprise.AttemptInfo) {
	w.heard()
	w.next.LeaseLapsed(a)
}

func (w *watcher) StaleResultRefused(a reprise.AttemptInfo) {
	w.heard()
	w.next.StaleResultRefused(a)
}

func (w *watcher) RunEnded(r reprise.RunEnd) {
	w.heard()
	w.next.RunEnded(r)
}

func (w *watcher) EngineBusy() {
	w.turned(true, 0)
	w.next.EngineBusy()
}

func (w *watcher) EngineIdle(steps int) {
	w.turned(false, steps)
	w.next.EngineIdle(steps)
}

// turned counts the engine turning busy or idle, with steps attempts in
// step code (none counted while it is busy).
func (w *watcher) turned(busy bool, steps int) {
	w.mu.Lock()
	w.busy, w.steps = busy, steps
	w.events++
	w.mu.Unlock()
}

// wakes is an Env's store as its engine sees it. The engine asks the store
// when something next comes due (NextWake) for the ready tasks of the steps
// it would claim; wakes keeps the names it asked about last, so that the
// Env asks the store the same question when it is to move the clock. (It
// hides no optional interface: SQLite and memory have none.)
type wakes struct {
	store.Store

	mu   sync.Mutex
	last []string
}

// NextWake implements store.Store.
func (w *wakes) NextWake(ctx context.Context, p *store.NextWakeParams) (store.Wake, error) {
	w.mu.Lock()
	w.last = append(w.last[:0], p.Steps...)
	w.mu.Unlock()
	return w.Store.NextWake(ctx, p)
}

// steps returns the names the engine asked NextWake about last: none
// (never nil, which would ask about every step) before it first asked.
func (w *wakes) steps() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string{}, w.last...)
}
