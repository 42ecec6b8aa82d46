package store

import (
	"context"
	"time"
)

// NoticeKind says what a Notice is about.
type NoticeKind string

const (
	// NoticeTaskReady: a task of Step becomes ready to claim at At (now,
	// or a retry's time). Sent when a workflow schedules steps and when a
	// failed attempt is retried.
	NoticeTaskReady NoticeKind = "task_ready"
	// NoticeOutcome: the history of run RunID got something its workflow
	// waits for (a step's result or failure, a fired timer) or the run was
	// cancelled. Owner is the engine holding the run's lease, empty when
	// none does.
	NoticeOutcome NoticeKind = "outcome"
	// NoticeRunReady: run RunID of Workflow was created without an owner
	// and waits to be claimed; without a RunID, an engine released its
	// runs (RunRelease) and they wait to be claimed.
	NoticeRunReady NoticeKind = "run_ready"
	// NoticeResync: the listener (re)connected. Notices sent while it was
	// away are lost, so whoever listens should look at everything now:
	// claim runs and tasks, and ask NextWake.
	NoticeResync NoticeKind = "resync"
)

// A Notice tells a listener that something in the store may want its
// attention. Notices are hints that save polling, never a record: a store
// sends one only after the transaction that made it true has committed, so
// the change is visible when the notice arrives, but a notice can be lost
// (a crash right after the commit; the listener's connection dropping, after
// which NoticeResync follows), and identical notices sent close together
// may arrive as one. An engine still claims on a timer.
type Notice struct {
	Kind     NoticeKind `json:"kind"`
	RunID    string     `json:"run_id,omitempty"`
	Owner    string     `json:"owner,omitempty"`
	Workflow string     `json:"workflow,omitempty"`
	Step     string     `json:"step,omitempty"`
	At       time.Time  `json:"at,omitzero"`
	// Seq, for NoticeOutcome, is the seq of the last event the change
	// appended to the run's history; zero when the store does not say. An
	// engine that has every event up to Seq (it made the change itself,
	// and has them from the store's answer) need not read the history.
	Seq int64 `json:"seq,omitempty"`
}

// A Notifier is a Store that can tell engines, in other processes too,
// when something changes, so that they need not poll. Listen calls fn for
// each notice until ctx ends. The engine uses it when its store has it.
type Notifier interface {
	Listen(ctx context.Context, fn func(Notice)) error
}
