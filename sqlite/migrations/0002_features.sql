-- reprise schema, version 2: child runs, redrive, poison counts.

-- A child run reports its end to its parent at parent_position, if the
-- parent is still in parent_execution. runs_parent finds a parent's
-- children when it is cancelled; only child runs are in it.
ALTER TABLE runs ADD COLUMN parent_position INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN parent_execution INTEGER NOT NULL DEFAULT 0;
CREATE INDEX runs_parent ON runs (parent_id) WHERE parent_id IS NOT NULL;

-- base: the attempt a redrive restarted the step's budget from.
-- lapses: leases in a row that lapsed without a result.
ALTER TABLE tasks ADD COLUMN base INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN lapses INTEGER NOT NULL DEFAULT 0;

-- failed_steps: the task of each step that failed for good, as it was,
-- kept so that RunRedrive can make it ready again. Not part of the queue.
CREATE TABLE failed_steps (
	id              INTEGER PRIMARY KEY,
	run_id          TEXT NOT NULL,
	execution       INTEGER NOT NULL,
	position        INTEGER NOT NULL,
	step            TEXT NOT NULL,
	input           BLOB,
	idempotency_key TEXT NOT NULL,
	policy          BLOB,
	timeout         INTEGER NOT NULL,
	attempt         INTEGER NOT NULL,
	base            INTEGER NOT NULL
);

CREATE UNIQUE INDEX failed_steps_run ON failed_steps (run_id, execution, position);
