-- reprise schema version 2: child runs, redrive and poison counts.

-- A child run names its parent, the position in the parent's workflow that
-- started it and the parent's execution then; '' and 0 for a run without a
-- parent. has_children is set on a parent when its first child is created
-- (and never cleared), so that ending a run looks for children to cancel
-- only when it may have some.
ALTER TABLE reprise_run
    ADD COLUMN parent_id        text    NOT NULL DEFAULT '',
    ADD COLUMN parent_position  integer NOT NULL DEFAULT 0,
    ADD COLUMN parent_execution integer NOT NULL DEFAULT 0,
    ADD COLUMN has_children     boolean NOT NULL DEFAULT false;

-- Ending a run: its active children, to cancel them.
CREATE INDEX reprise_run_parent ON reprise_run (parent_id)
    WHERE parent_id <> '' AND status IN ('pending', 'running');

-- base is the attempt a redrive restarted the budget from; lapses counts
-- the leases in a row that lapsed without a result.
ALTER TABLE reprise_task
    ADD COLUMN base   integer NOT NULL DEFAULT 0,
    ADD COLUMN lapses integer NOT NULL DEFAULT 0;

-- Steps that failed for good: a task row moves here when its step fails,
-- so that RunRedrive can make it ready again as it was scheduled. seq is
-- the StepFailed event's: a redrive takes the step whose StepFailed is the
-- last step outcome of the run's current execution. Rows go when the run
-- ends otherwise than failed, or continues as new.
CREATE TABLE reprise_step_failed (
    run_id          text        NOT NULL,
    execution       integer     NOT NULL,
    position        integer     NOT NULL,
    step            text        NOT NULL,
    input           json,
    idempotency_key text        NOT NULL,
    policy          json,
    timeout         interval    NOT NULL,
    attempt         integer     NOT NULL,
    seq             bigint      NOT NULL,
    PRIMARY KEY (run_id, execution, position)
);
