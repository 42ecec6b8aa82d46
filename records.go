package reprise

import "reprise/store"

// The records a user reads: a run, its status and its history. They are
// defined in package store, beside the Store interface that persists them;
// these names are the same types.
type (
	// A Run is one execution of a workflow.
	Run = store.Run
	// RunStatus is where a run is in its life.
	RunStatus = store.RunStatus
	// An Event is one entry of a run's append-only history; its types are
	// store.EventRunStarted and the others of package store.
	Event = store.Event
	// EventType says what an Event records.
	EventType = store.EventType
	// ErrorInfo is an error as the history keeps it.
	ErrorInfo = store.ErrorInfo
	// Waiting is the step a run waits for that no worker has claimed for
	// long (Engine.RunWaiting).
	Waiting = store.Waiting
)

// The statuses of a run.
const (
	RunPending   = store.RunPending
	RunRunning   = store.RunRunning
	RunCompleted = store.RunCompleted
	RunFailed    = store.RunFailed
	RunCancelled = store.RunCancelled
)

// Errors the engine passes on from its store. Match them with errors.Is.
var (
	// ErrNotFound: no run with that id.
	ErrNotFound = store.ErrNotFound
	// ErrLeaseLost: the run's or the attempt's lease was lost; the write
	// changed nothing.
	ErrLeaseLost = store.ErrLeaseLost
	// ErrRunFinished: the run already ended.
	ErrRunFinished = store.ErrRunFinished
	// ErrNotRedrivable: the run did not fail because a step failed.
	ErrNotRedrivable = store.ErrNotRedrivable
	// ErrEngineLive: a live engine already runs under that worker id.
	ErrEngineLive = store.ErrEngineLive
)
