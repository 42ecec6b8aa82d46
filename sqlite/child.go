package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"reprise/store"
)

// createChild creates a child run of the advance p in the parent's
// execution, unowned, as the advance's ChildRun says, with its first
// events in its own history. A run with the id that exists already is left
// as it is.
func (tx *txn) createChild(p *store.RunAdvanceParams, execution int, c *store.ChildSpec) error {
	status, events := p.ChildRun(c)
	n, err := tx.exec(`
		INSERT INTO runs (id, workflow, status, input, created_at, parent_id, parent_position, parent_execution,
			trace_parent)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO NOTHING`,
		c.ID, c.Workflow, string(status), blob(c.Input), tx.nanos, p.RunID, c.Position, execution, c.TraceParent)
	if err != nil {
		return fmt.Errorf("start child %s: %w", c.ID, err)
	}
	if n == 0 {
		return nil
	}
	if err := tx.appendEvents(c.ID, 0, events, nil); err != nil {
		return fmt.Errorf("start child %s: %w", c.ID, err)
	}
	return nil
}

// endChildren cancels the active children of a run that its workflow
// ends, if it has any (activeRun with ending said so), and returns the
// runs below it that it cancelled.
func (tx *txn) endChildren(run runState, id string) ([]*store.Run, error) {
	if !run.children {
		return nil, nil
	}
	return tx.cancelChildren(id, false)
}

// cancelChildren cancels the active children of a run that ends, and
// theirs in turn; cancelled says that the run was cancelled (ParentEnded).
// It returns the runs it cancelled, as they are now.
func (tx *txn) cancelChildren(parentID string, cancelled bool) ([]*store.Run, error) {
	rows, err := tx.query(`
		SELECT id, execution, (SELECT coalesce(max(seq), 0) FROM events WHERE run_id = runs.id)
		FROM runs WHERE parent_id = ? AND status IN ('pending', 'running')`, parentID)
	if err != nil {
		return nil, err
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
			return nil, err
		}
		children = append(children, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var ended []*store.Run
	for _, c := range children {
		below, err := tx.cancelRun(c.id, c.execution, c.last, store.ParentEnded(cancelled))
		if err != nil {
			return nil, fmt.Errorf("cancel child %s: %w", c.id, err)
		}
		run, err := getRun(tx, c.id)
		if err != nil {
			return nil, fmt.Errorf("cancel child %s: %w", c.id, err)
		}
		ended = append(append(ended, run), below...)
	}
	return ended, nil
}

// cancelRun cancels an active run: appends cancelled, its RunCancelled,
// drops its work and cancels its children. It returns the runs below it
// that it cancelled.
func (tx *txn) cancelRun(id string, execution int, last int64, cancelled store.Event) ([]*store.Run, error) {
	_, err := tx.exec(`UPDATE runs SET status = 'cancelled', owner = '' WHERE id = ?`, id)
	if err != nil {
		return nil, err
	}
	cancelled.Execution = execution
	if err := tx.appendEvents(id, last, []store.Event{cancelled}, nil); err != nil {
		return nil, err
	}
	if err := tx.dropWork(id, allWork); err != nil {
		return nil, err
	}
	return tx.cancelChildren(id, true)
}

// tellParent appends e, the end of a child run (ChildEnded), to the
// parent, if the parent still waits for it (ParentWaits). It returns what
// it appended, or nil.
func (tx *txn) tellParent(child runState, e store.Event) (*store.Outcome, error) {
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
	if !store.ParentWaits(store.RunStatus(status), execution, child.parentExecution) {
		return nil, nil
	}
	e.Execution = execution
	events := []store.Event{e}
	if err := tx.appendEvents(child.parentID, last, events, nil); err != nil {
		return nil, fmt.Errorf("parent %s: %w", child.parentID, err)
	}
	return &store.Outcome{RunID: child.parentID, Owner: owner, Events: events}, nil
}

// RunCancel cancels an active run and its active children, and tells its
// parent, if it is a child.
func (s *Store) RunCancel(ctx context.Context, p *store.RunCancelParams) (*store.Cancelled, error) {
	var c store.Cancelled
	err := s.write(ctx, func(tx *txn) error {
		r, err := tx.activeRun(p.ID, true)
		if err != nil {
			return err
		}
		if c.Descendants, err = tx.cancelRun(p.ID, r.execution, r.last, p.Cancelled()); err != nil {
			return err
		}
		if r.parentID != "" {
			ended := store.ChildEnded(p.ID, r.parentPosition, store.RunCancelled, nil, nil)
			if _, err := tx.tellParent(r, ended); err != nil {
				return err
			}
		}
		c.Run, err = getRun(tx, p.ID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cancel run %s: %w", p.ID, err)
	}
	return &c, nil
}
