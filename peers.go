package reprise

import (
	"reflect"
	"slices"
	"sync"

	"reprise/store"
)

// Peers. A store that is a store.Notifier (PostgreSQL) tells each engine
// of the outcomes others record for its runs. One that is not (SQLite, the
// memory store) tells no one: the engine that records an outcome hands it
// over itself. Engines of one process running on one such store are peers:
// an attempt one of them runs, or a pull worker's result given to it, may
// be for a run another holds, and a cancel through one may be of a run
// another holds; they reach that engine through this registry.

var peers struct {
	mu sync.Mutex
	on map[store.Store][]*Engine
}

// joinPeers enters the engine among the running engines of its store, if
// the store sends no notices, and returns what takes it out.
func (e *Engine) joinPeers() (leave func()) {
	if !e.peered() {
		return func() {}
	}
	peers.mu.Lock()
	defer peers.mu.Unlock()
	if peers.on == nil {
		peers.on = map[store.Store][]*Engine{}
	}
	peers.on[e.store] = append(peers.on[e.store], e)
	return func() {
		peers.mu.Lock()
		defer peers.mu.Unlock()
		rest := slices.DeleteFunc(peers.on[e.store], func(p *Engine) bool { return p == e })
		if len(rest) == 0 {
			delete(peers.on, e.store)
		} else {
			peers.on[e.store] = rest
		}
	}
}

// peers returns the other running engines on the engine's store that
// joinPeers entered.
func (e *Engine) peers() []*Engine {
	if !e.peered() {
		return nil
	}
	peers.mu.Lock()
	defer peers.mu.Unlock()
	var others []*Engine
	for _, p := range peers.on[e.store] {
		if p != e {
			others = append(others, p)
		}
	}
	return others
}

// hasPeers reports whether another engine runs on the engine's store, as
// peers would, without making the list.
func (e *Engine) hasPeers() bool {
	if !e.peered() {
		return false
	}
	peers.mu.Lock()
	defer peers.mu.Unlock()
	return len(peers.on[e.store]) > 1
}

// peered reports whether the engine's store makes peers of its engines:
// it sends no notices, and can key the registry (a store value that is a
// pointer, as the stores are).
func (e *Engine) peered() bool {
	_, notifies := e.store.(store.Notifier)
	return !notifies && reflect.TypeOf(e.store).Comparable()
}
