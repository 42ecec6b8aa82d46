-- reprise schema, version 4: status indexes for the runs that are looked for.
--
-- runs_status indexed every run by status, so a run's end moved its entry
-- (a delete and an insert) and completed runs, most of them, filled the
-- index. runs_active holds the pending and running runs only, for RunClaim
-- and RunRenew, and RunList of those two; runs_unsuccessful the failed and
-- cancelled ones, which users list. A completed run leaves runs_active
-- and enters no status index: RunList of completed runs reads runs_created,
-- where nearly every run is one.
DROP INDEX runs_status;
CREATE INDEX runs_active ON runs (created_at, id) WHERE status IN ('pending', 'running');
CREATE INDEX runs_unsuccessful ON runs (status, created_at, id) WHERE status IN ('failed', 'cancelled');
