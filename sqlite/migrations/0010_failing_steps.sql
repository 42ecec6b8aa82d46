-- reprise schema, version 10: the error type of a failing step, for the
-- runs list's filters (retrying, by step, by error type) and the metrics.
--
-- error_type is the type of the last failed attempt of a task the policy
-- retries, NULL for a task none of whose attempts failed (or that a
-- redrive made ready again), and of a failed step, the type it failed
-- with. Few tasks have one at a time, so the partial index is small: the
-- lists read it and look the runs up by id. failed_steps, kept for failed
-- runs, grows with them: its indexes find a step or an error type's runs.
ALTER TABLE tasks ADD COLUMN error_type TEXT;
ALTER TABLE failed_steps ADD COLUMN error_type TEXT;
CREATE INDEX tasks_failing ON tasks (run_id, step, error_type, lease_until) WHERE error_type IS NOT NULL;
CREATE INDEX failed_steps_step ON failed_steps (step, error_type);
CREATE INDEX failed_steps_error_type ON failed_steps (error_type);
