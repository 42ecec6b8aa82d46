-- reprise schema version 1: runs, their histories, the task queue and timers.
--
-- Every table lives in the schema the store was opened with (search_path).
-- There are no foreign keys: every write that touches a run's tasks, timers
-- or history holds the run's row lock, and the referential checks would cost
-- a lookup per appended event on the hot path.

-- A run is one execution of a workflow. execution counts continue-as-new
-- restarts; owner, token and lease_until are the lease of the engine that
-- executes the workflow code; last_seq is the seq of the newest event, so
-- that appending under the row lock keeps the history gapless.
CREATE TABLE reprise_run (
    id          text        PRIMARY KEY,
    workflow    text        NOT NULL,
    status      text        NOT NULL CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
    execution   integer     NOT NULL DEFAULT 1,
    input       json,
    output      json,
    error       json,
    owner       text        NOT NULL DEFAULT '',
    token       bigint      NOT NULL DEFAULT 0,
    lease_until timestamptz,
    last_seq    bigint      NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
) WITH (fillfactor = 80);

-- RunList: newest first, optionally by status or workflow.
CREATE INDEX reprise_run_created_at ON reprise_run (created_at DESC, id DESC);
CREATE INDEX reprise_run_status ON reprise_run (status, created_at DESC, id DESC);
CREATE INDEX reprise_run_workflow ON reprise_run (workflow, created_at DESC, id DESC);
-- RunClaim: active runs nobody holds, oldest first, and held ones whose
-- lease lapsed.
CREATE INDEX reprise_run_unowned ON reprise_run (created_at, id)
    WHERE status IN ('pending', 'running') AND owner = '';
CREATE INDEX reprise_run_lease ON reprise_run (lease_until)
    WHERE status IN ('pending', 'running') AND owner <> '';

-- A run's history: one row per event, numbered from 1 without gaps. data is
-- the whole event as JSON (json, not jsonb, so that inputs and outputs come
-- back byte for byte); run_id, seq, type, execution and at are copies for
-- queries.
CREATE TABLE reprise_event (
    run_id    text        NOT NULL,
    seq       bigint      NOT NULL,
    type      text        NOT NULL,
    execution integer     NOT NULL,
    at        timestamptz NOT NULL,
    data      json        NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE INDEX reprise_event_type ON reprise_event (type, at);

-- The task queue: one row per scheduled step, not per attempt. A row is
-- ready when owner is empty and ready_at has passed; claiming it starts an
-- attempt (attempt + 1) under a lease fenced by token. Completing the step
-- or failing it for good deletes the row: the history keeps the record.
CREATE TABLE reprise_task (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id           text        NOT NULL,
    execution        integer     NOT NULL,
    position         integer     NOT NULL,
    step             text        NOT NULL,
    input            json,
    idempotency_key  text        NOT NULL,
    policy           json,
    timeout          interval    NOT NULL DEFAULT '0',
    attempt          integer     NOT NULL DEFAULT 0,
    owner            text        NOT NULL DEFAULT '',
    token            bigint      NOT NULL DEFAULT 0,
    ready_at         timestamptz NOT NULL,
    lease_until      timestamptz,
    started_at       timestamptz,
    first_started_at timestamptz,
    created_at       timestamptz NOT NULL,
    UNIQUE (run_id, execution, position)
) WITH (fillfactor = 90);

-- TaskClaim and NextWake: ready rows of a step, earliest first.
CREATE INDEX reprise_task_ready ON reprise_task (step, ready_at, id) WHERE owner = '';
-- TaskListExpired and NextWake: leases, earliest expiry first.
CREATE INDEX reprise_task_lease ON reprise_task (lease_until) WHERE owner <> '';

-- Durable timers (workflow sleeps). Firing one deletes it and appends
-- TimerFired to the run's history.
CREATE TABLE reprise_timer (
    id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id    text        NOT NULL,
    execution integer     NOT NULL,
    position  integer     NOT NULL,
    fire_at   timestamptz NOT NULL,
    UNIQUE (run_id, execution, position)
);
CREATE INDEX reprise_timer_fire_at ON reprise_timer (fire_at);
