// Package memory is reprise's in-memory reference store: the store.Store
// contract in its plainest form, and a fast store for tests.
package memory

import (
	"context"
	"errors"
	"sync"
	"time"

	"reprise/store"
)

var _ store.Store = (*Store)(nil)

// errClosed is returned by calls made after Close.
var errClosed = errors.New("memory: store is closed")

// Options configures a Store. The zero value works.
type Options struct {
	// Now is the store's clock: it stamps events and computes ready, lease
	// and fire times.
	// Default: time.Now.
	Now func() time.Time
}

// Store is a store.Store that keeps everything in memory, for as long as
// the process lives. Every method is one transition under one mutex: it
// checks everything it needs first, and fails, with whatever error,
// having changed nothing; only then it writes, and nothing left can fail.
// Records go in and out as deep copies, so that no caller shares a byte
// with the store.
//
// It keeps what the stores on a database keep, in plain maps, and does
// what they do; where sqlite and postgres differ, a method's comment says
// which it follows. It is not a store.Notifier: like sqlite, it leaves the
// engine to poll.
type Store struct {
	*db
	closed bool // guarded by db.mu
}

// db is the memory that the stores of one New share, as the stores of
// one process share a database file.
type db struct {
	now func() time.Time

	mu    sync.Mutex
	runs  map[string]*run
	tasks map[int64]*task
	// lastTaskID numbers tasks, never twice: a dropped task's (ID, Token)
	// never matches a later task.
	lastTaskID  int64
	timers      map[int64]*timer
	lastTimerID int64
	// failed keeps the task of each step that failed for good, as it was,
	// for RunRedrive. It is not part of the queue.
	failed map[position]*task
	// attempts are the attempts that claims with Keep started, by task.
	attempts map[int64][]store.TaskAttempt
	// steps are the step definitions, each name's versions in order.
	steps map[string][]*store.StepDefinition
	// flows are the flows, each name's versions in order.
	flows map[string][]*store.FlowDefinition
	// engines are the engines EngineStart recorded, each with the store it
	// started on; nil once that store is closed (the engine is gone).
	engines map[string]*Store
}

// A position is a step's or timer's place in a run's execution.
type position struct {
	runID     string
	execution int
	position  int
}

// New returns an empty store.
func New(opts Options) *Store {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return &Store{db: &db{
		now:      now,
		runs:     make(map[string]*run),
		tasks:    make(map[int64]*task),
		timers:   make(map[int64]*timer),
		failed:   make(map[position]*task),
		attempts: make(map[int64][]store.TaskAttempt),
		steps:    make(map[string][]*store.StepDefinition),
		flows:    make(map[string][]*store.FlowDefinition),
		engines:  make(map[string]*Store),
	}}
}

// Open returns another store on s's memory, as a second process opening
// the same database would get: the engines started on a store that is
// closed are gone (EngineGone) for the others.
func (s *Store) Open() *Store {
	return &Store{db: s.db}
}

// Close closes the store; calls after it fail. The engines started on it
// without EngineStop are gone from then on, as if their process had died.
// The memory stays for the other stores Open returned.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, on := range s.engines {
		if on == s {
			s.engines[id] = nil
		}
	}
	s.closed = true
	return nil
}

// begin locks the store for one call and returns the store's time for
// it. It fails, having locked nothing, if ctx has ended or the store is
// closed.
func (s *Store) begin(ctx context.Context) (time.Time, error) {
	if err := context.Cause(ctx); err != nil {
		return time.Time{}, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return time.Time{}, errClosed
	}
	return s.now().UTC(), nil // UTC drops the monotonic reading too
}
