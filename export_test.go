package reprise

import "reprise/store"

// Notify hands e a store's notice, as its listener would.
func (e *Engine) Notify(n store.Notice) { e.notice(n) }

// PlainValue is plainValue, for tests.
var PlainValue = plainValue

// Waiters counts the calls of Wait for run id waiting now.
func (e *Engine) Waiters(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.waiters[id])
}

// LocalSteps returns the names of the steps e runs itself.
func (e *Engine) LocalSteps() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	names := make([]string, 0, len(e.steps))
	for name := range e.steps {
		names = append(names, name)
	}
	return names
}

// Parked reports whether run id is parked: this engine evicted its
// replayer and holds its lease.
func (e *Engine) Parked(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.parked[id]
	return ok
}
