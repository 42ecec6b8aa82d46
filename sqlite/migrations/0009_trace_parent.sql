-- reprise schema, version 9: a run's trace context.
--
-- A run keeps the W3C traceparent it was started under (or one made for
-- it), so that whichever process executes it, after a crash or on another
-- machine, continues the same trace. Empty for runs started without one.
ALTER TABLE runs ADD COLUMN trace_parent TEXT NOT NULL DEFAULT '';
