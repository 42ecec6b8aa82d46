-- reprise schema, version 1. Times are Unix nanoseconds in UTC (INTEGER), so
-- that they compare as numbers; durations are nanoseconds. JSON documents
-- (inputs, outputs, errors, policies, event bodies) are stored as BLOBs and
-- returned byte for byte.

-- runs: one row per run, its current state and its workflow lease.
-- execution counts continue-as-new restarts; parent_id names the run that
-- started this one as a child. Neither is used yet. Clustered by id: the
-- writes look runs up by id, and WITHOUT ROWID spares an index.
CREATE TABLE runs (
	id          TEXT PRIMARY KEY,
	workflow    TEXT NOT NULL,
	status      TEXT NOT NULL CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
	execution   INTEGER NOT NULL DEFAULT 1,
	parent_id   TEXT,
	input       BLOB,
	output      BLOB,
	error       BLOB,
	owner       TEXT NOT NULL DEFAULT '',  -- the engine holding the lease; '' for none
	lease_until INTEGER NOT NULL DEFAULT 0, -- 0 when nobody holds it
	token       INTEGER NOT NULL DEFAULT 0, -- fencing token, bumped by each claim
	created_at  INTEGER NOT NULL
) WITHOUT ROWID;

-- RunList: newest first, optionally by workflow or status. runs_status
-- also finds the active runs for RunClaim and RunRenew. Every index costs
-- each write that touches it, so there are no more.
CREATE INDEX runs_created ON runs (created_at, id);
CREATE INDEX runs_workflow ON runs (workflow, created_at, id);
CREATE INDEX runs_status ON runs (status, created_at, id);

-- events: every run's append-only history. seq numbers a run's events from
-- 1 without gaps; the body is the event as JSON without seq, at and
-- execution, which are the columns. Clustered by (run_id, seq), so a run's
-- history is one range scan.
CREATE TABLE events (
	run_id    TEXT NOT NULL,
	seq       INTEGER NOT NULL,
	execution INTEGER NOT NULL,
	type      TEXT NOT NULL,
	at        INTEGER NOT NULL,
	body      BLOB NOT NULL,
	PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;

-- tasks: the durable queue, one row per scheduled step (not per attempt).
-- A task is ready when lease_until IS NULL and ready_at has passed, leased
-- while lease_until is set. AUTOINCREMENT keeps ids from being reused, so a
-- dropped task's (id, token) never matches a later task.
CREATE TABLE tasks (
	id               INTEGER PRIMARY KEY AUTOINCREMENT,
	run_id           TEXT NOT NULL,
	execution        INTEGER NOT NULL,
	position         INTEGER NOT NULL,
	step             TEXT NOT NULL,
	input            BLOB,
	idempotency_key  TEXT NOT NULL,
	policy           BLOB,
	timeout          INTEGER NOT NULL DEFAULT 0, -- per attempt; 0 for none
	attempt          INTEGER NOT NULL DEFAULT 0, -- attempts started
	token            INTEGER NOT NULL DEFAULT 0, -- bumped by each claim
	owner            TEXT NOT NULL DEFAULT '',
	ready_at         INTEGER NOT NULL,
	lease_until      INTEGER,
	started_at       INTEGER,
	first_started_at INTEGER
);

CREATE UNIQUE INDEX tasks_run ON tasks (run_id, execution, position);
-- TaskClaim and NextWake: ready tasks of a step, earliest first.
CREATE INDEX tasks_ready ON tasks (step, ready_at, id) WHERE lease_until IS NULL;
-- TaskListExpired and NextWake: leases by expiry.
CREATE INDEX tasks_lease ON tasks (lease_until) WHERE lease_until IS NOT NULL;

-- timers: durable timers, fired and deleted once due.
CREATE TABLE timers (
	id        INTEGER PRIMARY KEY,
	run_id    TEXT NOT NULL,
	execution INTEGER NOT NULL,
	position  INTEGER NOT NULL,
	fire_at   INTEGER NOT NULL
);

CREATE UNIQUE INDEX timers_run ON timers (run_id, execution, position);
CREATE INDEX timers_fire ON timers (fire_at);
