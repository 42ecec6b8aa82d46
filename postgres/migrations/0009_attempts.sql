-- reprise schema, version 9: the attempts that pull workers claimed.
--
-- A task's row goes when its step completes or fails for good, or when its
-- run drops it. A pull worker whose answer was lost sends its result again,
-- maybe after that: reprise_attempt keeps, for each attempt that a claim
-- with Keep started (the HTTP API's claims), which run's step it is, so
-- that the run's history tells such a repeat from a stale write. One small
-- row per claimed attempt, written with the claim; the rows stay, as the
-- history does.
CREATE TABLE reprise_attempt (
    task_id   bigint  NOT NULL,
    token     bigint  NOT NULL,
    run_id    text    COLLATE "C" NOT NULL,
    execution integer NOT NULL,
    position  integer NOT NULL,
    attempt   integer NOT NULL,
    PRIMARY KEY (task_id, token)
);
