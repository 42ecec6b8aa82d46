package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"reprise/postgres/internal/pgtx"
	"reprise/store"
)

// finish appends the run's end event and returns the statement that ends
// it, for appender.queueWith (see end).
func finish(a *appender, run *lockedRun, f *store.RunFinish) (string, []any, error) {
	if err := a.add(run.runHead, f.Ended()); err != nil {
		return "", nil, err
	}
	return end(run, f.Status, f.Output, f.Error, f.DropsFailedSteps())
}

// end returns the statement that ends the run after its last event, as
// the final statement of appender.queueWith, which advances the run's
// head: it removes the run's tasks and timers, so that results of running
// attempts are rejected, and its failed steps with dropFailed
// (RunFinish.DropsFailedSteps). Its parameters are arrays, so that the
// ends of several runs may go as one statement (Tx.QueueMergeable).
func end(run *lockedRun, status store.RunStatus, output json.RawMessage, errInfo *store.ErrorInfo, dropFailed bool) (string, []any, error) {
	encErr, err := encodeError(errInfo)
	if err != nil {
		return "", nil, err
	}
	var errText *string
	if encErr != nil {
		s := encErr.(string)
		errText = &s
	}
	run.status = status
	c := &endCols{}
	c.id, c.dropFailed, c.status = c.id0[:], c.dropFailed0[:], c.status0[:]
	c.output, c.err, c.lastSeq, c.updatedAt = c.output0[:], c.err0[:], c.lastSeq0[:], c.updatedAt0[:]
	c.id[0], c.dropFailed[0], c.status[0] = run.id, dropFailed, string(status)
	c.output[0], c.err[0], c.lastSeq[0], c.updatedAt[0] = jsonText(output), errText, run.lastSeq, run.updatedAt
	c.args = [...]any{&c.id, &c.dropFailed, &c.status, &c.output, &c.err, &c.lastSeq, &c.updatedAt}
	return `,
		ended AS MATERIALIZED (
			SELECT * FROM unnest($7::text[], $8::bool[], $9::text[], $10::text[], $11::text[], $12::bigint[],
				$13::timestamptz[]) AS e(id, drop_failed, status, output, error, last_seq, updated_at)),
		tasks AS (DELETE FROM reprise_task t USING ended WHERE t.run_id = ended.id),
		failed AS (DELETE FROM reprise_step_failed f USING ended WHERE ended.drop_failed AND f.run_id = ended.id),
		timers AS (DELETE FROM reprise_timer m USING ended WHERE m.run_id = ended.id)
		UPDATE reprise_run r SET status = ended.status, output = ended.output::json, error = ended.error::json,
			owner = '', lease_until = NULL, last_seq = ended.last_seq, updated_at = ended.updated_at
		FROM ended
		WHERE r.id = ended.id`,
		c.args[:], nil
}

// endCols are end's arguments, the columns of one run, in one allocation
// (see insertCols).
type endCols struct {
	id, status  []string
	dropFailed  []bool
	output, err []*string
	lastSeq     []int64
	updatedAt   []time.Time
	args        [7]any

	id0, status0  [1]string
	dropFailed0   [1]bool
	output0, err0 [1]*string
	lastSeq0      [1]int64
	updatedAt0    [1]time.Time
}

// drop queues the removal of the runs' tasks and timers, and of their
// failed steps too when failedSteps is set.
func drop(tx *pgtx.Tx, ids []string, failedSteps bool) {
	if len(ids) == 1 {
		// The common case, by key: an array of ids may be planned as a
		// scan of the tables (see appender.queue).
		tx.Queue(`
			WITH tasks AS (DELETE FROM reprise_task WHERE run_id = $1),
			failed AS (DELETE FROM reprise_step_failed WHERE $2 AND run_id = $1)
			DELETE FROM reprise_timer WHERE run_id = $1`,
			ids[0], failedSteps)
		return
	}
	tx.Queue(`
		WITH tasks AS (DELETE FROM reprise_task WHERE run_id = ANY($1)),
		failed AS (DELETE FROM reprise_step_failed WHERE $2 AND run_id = ANY($1))
		DELETE FROM reprise_timer WHERE run_id = ANY($1)`,
		ids, failedSteps)
}

// continueAsNew ends the run's execution and starts the next with f's
// input: it drops the run's tasks and timers, appends RunContinuedAsNew
// and the new execution's RunStarted (RunFinish.Continued). The run stays
// running, with its lease.
func continueAsNew(a *appender, tx *pgtx.Tx, run *lockedRun, f *store.RunFinish) error {
	ended, started := f.Continued(run.workflow, run.execution)
	if err := a.add(run.runHead, ended); err != nil {
		return err
	}
	run.execution = started.Execution
	if err := a.add(run.runHead, started); err != nil {
		return err
	}
	drop(tx, []string{run.id}, f.DropsFailedSteps())
	tx.Queue(`
		UPDATE reprise_run SET status = 'running', execution = $2, input = $3::json, last_seq = $4, updated_at = $5
		WHERE id = $1`,
		run.id, run.execution, nullJSON(f.Input), run.lastSeq, run.updatedAt)
	return nil
}

// cancelBelow cancels the active runs below run (locked by
// lockDescendants), since a child never outlives its parent: it appends
// RunCancelled to each (ParentEnded, of run's own children as cancelled
// says run ended, of theirs as cancelled), and drops their tasks and
// timers. A cancelled child reports to no parent: its parent is ending in
// the same transaction.
func cancelBelow(a *appender, tx *pgtx.Tx, run *lockedRun, below []*lockedRun, cancelled bool) error {
	if len(below) == 0 {
		return nil
	}
	ids := make([]string, len(below))
	for i, c := range below {
		ids[i] = c.id
		if err := a.add(c.runHead, store.ParentEnded(cancelled || c.parentID != run.id)); err != nil {
			return err
		}
		c.status = store.RunCancelled
		if c.owner != "" {
			tx.Notify(Notice{Kind: NoticeOutcome, RunID: c.id, Owner: c.owner, Seq: c.lastSeq})
		}
	}
	tx.Queue(`
		UPDATE reprise_run SET status = 'cancelled', output = NULL, error = NULL, owner = '', lease_until = NULL
		WHERE id = ANY($1)`,
		ids)
	drop(tx, ids, true)
	return nil
}

// reportToParent appends the end of child run run (ChildEnded) to its
// parent (locked by lockRun), if the parent still waits for it
// (ParentWaits), and returns the parent's Outcome then, or nil.
func reportToParent(a *appender, tx *pgtx.Tx, run, parent *lockedRun, status store.RunStatus, output json.RawMessage, errInfo *store.ErrorInfo) (*store.Outcome, error) {
	if parent == nil || parent.id != run.parentID || !store.ParentWaits(parent.status, parent.execution, run.parentExecution) {
		return nil, nil
	}
	if err := a.add(parent.runHead, store.ChildEnded(run.id, run.parentPosition, status, output, errInfo)); err != nil {
		return nil, err
	}
	tx.Notify(Notice{Kind: NoticeOutcome, RunID: parent.id, Owner: parent.owner, Seq: parent.lastSeq})
	return &store.Outcome{RunID: parent.id, Owner: parent.owner, Events: a.eventsOf(parent.runHead)}, nil
}

// RunCancel cancels an active run: appends RunCancelled, ends the run,
// drops its tasks and timers, cancels its active descendants, and reports
// ChildFailed{ChildStatus: "cancelled"} to its parent if it has an active one.
func (s *Store) RunCancel(ctx context.Context, p *store.RunCancelParams) (*store.Cancelled, error) {
	var c store.Cancelled
	err := s.committer.RunOwning(ctx, []*pgtx.Read{lockRunRead(s.clock(), p.ID, true)}, func(tx *pgtx.Tx) error {
		r, parent, now, err := lockRun(ctx, tx, s.clock(), p.ID, true)
		if err != nil {
			return err
		}
		if r.status.Final() {
			return store.ErrRunFinished
		}
		below, err := lockDescendants(ctx, tx, r)
		if err != nil {
			return err
		}
		a := newAppender(now)
		if err := a.add(r.runHead, p.Cancelled()); err != nil {
			return err
		}
		final, args, err := end(r, store.RunCancelled, nil, nil, true)
		if err != nil {
			return err
		}
		if err := cancelBelow(a, tx, r, below, true); err != nil {
			return err
		}
		if _, err := reportToParent(a, tx, r, parent, store.RunCancelled, nil, nil); err != nil {
			return err
		}
		a.queueWith(tx, []*runHead{r.runHead}, final, args...)
		if r.owner != "" {
			tx.Notify(Notice{Kind: NoticeOutcome, RunID: r.id, Owner: r.owner, Seq: r.lastSeq})
		}
		queueRun(tx, r.id, &c.Run)
		queueRuns(tx, below, &c.Descendants)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cancel run %q: %w", p.ID, err)
	}
	return &c, nil
}
