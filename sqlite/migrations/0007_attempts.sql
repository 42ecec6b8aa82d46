-- reprise schema, version 7: the attempts that pull workers claimed.
--
-- A task's row goes when its step completes or fails for good, or when its
-- run drops it. A pull worker whose answer was lost sends its result again,
-- maybe after that: attempts keeps, for each attempt that a claim with Keep
-- started (the HTTP API's claims), which run's step it is, so that the
-- run's history tells such a repeat from a stale write. One small row per
-- claimed attempt, written by the claim; the rows stay, as the history does.
CREATE TABLE attempts (
	task_id   INTEGER NOT NULL,
	token     INTEGER NOT NULL,
	run_id    TEXT NOT NULL,
	execution INTEGER NOT NULL,
	position  INTEGER NOT NULL,
	attempt   INTEGER NOT NULL,
	PRIMARY KEY (task_id, token)
) WITHOUT ROWID;
