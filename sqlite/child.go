package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reprise/store"
)

// The reasons in RunCancelled of a child whose parent ended.
const (
	reasonParentFinished  = "parent finished"
	reasonParentCancelled = "parent cancelled"
)

// createChild creates a child run of the parent's execution, unowned and
// pending, with RunStarted in its own history. A run with the id that
// exists already is left as it is.
func (tx *txn) createChild(parentID string, execution int, c *store.ChildSpec) error {
	n, err := tx.exec(`
		INSERT INTO runs (id, workflow, status, input, created_at, parent_id, parent_position, parent_execution)
		VALUES (?, ?, 'pending', ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO NOTHING`,
		c.ID, c.Workflow, blob(c.Input), tx.nanos, parentID, c.Position, execution)
	if err != nil {
		return fmt.Errorf("start child %s: %w", c.ID, err)
	}
	if n == 0 {
		return nil
	}
	started := []store.Event{{Type: store.EventRunStarted, Execution: 1, Workflow: c.Workflow, Input: c.Input}}
	if err := tx.appendEvents(c.ID, 0, started, nil); err != nil {
		return fmt.Errorf("start child %s: %w", c.ID, err)
	}
	return nil
}

// endChildren cancels the active children of a run that ends, if it has
// any (activeRun with ending said so).
func (tx *txn) endChildren(run runState, id, reason string) error {
	if !run.children {
		return nil
	}
	return tx.cancelChildren(id, reason)
}

// cancelChildren cancels the active children of a run that ends, and
// theirs in turn.
func (tx *txn) cancelChildren(parentID, reason string) error {
	rows, err := tx.query(`
		SELECT id, execution, (SELECT coalesce(max(seq), 0) FROM events WHERE run_id = runs.id)
		FROM runs WHERE parent_id = ? AND status IN ('pending', 'running')`, parentID)
	if err != nil {
		return err
	}
	type child struct {
		id        string
		execution int
		last      int64
	}
	var children []child
	for rows.Next() {
		var c child
		if err := rows.Scan(&c.id, &c.execution, &c.last); err != nil {
			rows.Close()
			return err
		}
		children = append(children, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, c := range children {
		if err := tx.cancelRun(c.id, c.execution, c.last, reason); err != nil {
			return fmt.Errorf("cancel child %s: %w", c.id, err)
		}
	}
	return nil
}

// cancelRun cancels an active run: appends RunCancelled, drops its work
// and cancels its children.
func (tx *txn) cancelRun(id string, execution int, last int64, reason string) error {
	_, err := tx.exec(`UPDATE runs SET status = 'cancelled', owner = '', lease_until = 0 WHERE id = ?`, id)
	if err != nil {
		return err
	}
	cancelled := []store.Event{{Type: store.EventRunCancelled, Execution: execution, Reason: reason}}
	if err := tx.appendEvents(id, last, cancelled, nil); err != nil {
		return err
	}
	if err := tx.dropWork(id, allWork); err != nil {
		return err
	}
	return tx.cancelChildren(id, reasonParentCancelled)
}

// tellParent appends e, ChildCompleted or ChildFailed, to the parent of a
// child run that ended, if the parent is active and still in the
// execution that started the child. It returns what it appended, or nil.
func (tx *txn) tellParent(child runState, childID string, e store.Event) (*store.Outcome, error) {
	var status, owner string
	var execution int
	var last int64
	err := tx.queryRow(`SELECT status, execution, owner, `+lastSeq+` FROM runs WHERE id = ?1`, child.parentID).
		Scan(&status, &execution, &owner, &last)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("parent %s: %w", child.parentID, err)
	}
	if store.RunStatus(status).Final() || execution != child.parentExecution {
		return nil, nil
	}
	e.Execution, e.Position, e.Child = execution, child.parentPosition, childID
	events := []store.Event{e}
	if err := tx.appendEvents(child.parentID, last, events, nil); err != nil {
		return nil, fmt.Errorf("parent %s: %w", child.parentID, err)
	}
	return &store.Outcome{RunID: child.parentID, Owner: owner, Events: events}, nil
}

// RunCancel cancels an active run and its active children, and tells its
// parent, if it is a child.
func (s *Store) RunCancel(ctx context.Context, p *store.RunCancelParams) (*store.Run, error) {
	var run *store.Run
	err := s.write(ctx, func(tx *txn) error {
		r, err := tx.activeRun(p.ID, true)
		if err != nil {
			return err
		}
		if err := tx.cancelRun(p.ID, r.execution, r.last, p.Reason); err != nil {
			return err
		}
		if r.parentID != "" {
			failed := store.Event{Type: store.EventChildFailed, Reason: string(store.RunCancelled)}
			if _, err := tx.tellParent(r, p.ID, failed); err != nil {
				return err
			}
		}
		run, err = getRun(tx, p.ID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cancel run %s: %w", p.ID, err)
	}
	return run, nil
}
