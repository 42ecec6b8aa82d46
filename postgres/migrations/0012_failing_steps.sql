-- reprise schema, version 12: the error type of a failing step, for the
-- runs list's filters (retrying, by step, by error type) and the metrics.
--
-- error_type is the type of the last failed attempt of a task the policy
-- retries, NULL for a task none of whose attempts failed (or that a
-- redrive made ready again), and of a failed step, the type it failed
-- with. Few tasks have one at a time, so the partial index is small: the
-- lists read it and look the runs up by id. reprise_step_failed, kept for
-- failed runs, grows with them: its indexes find a step or an error
-- type's runs.
ALTER TABLE reprise_task ADD COLUMN error_type text COLLATE "C";
ALTER TABLE reprise_step_failed ADD COLUMN error_type text COLLATE "C",
    ALTER COLUMN step TYPE text COLLATE "C"; -- indexed now: keys compare as bytes
CREATE INDEX reprise_task_failing ON reprise_task (run_id, step, error_type, owner) WHERE error_type IS NOT NULL;
CREATE INDEX reprise_step_failed_step ON reprise_step_failed (step, error_type);
CREATE INDEX reprise_step_failed_error_type ON reprise_step_failed (error_type);
