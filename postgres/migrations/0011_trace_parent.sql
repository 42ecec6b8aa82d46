-- reprise schema, version 11: a run's trace context.
--
-- A run keeps the W3C traceparent it was started under (or one made for
-- it), so that whichever process executes it, after a crash or on another
-- machine, continues the same trace. Empty for runs started without one.
-- A constant default adds the column without rewriting the table.
ALTER TABLE reprise_run ADD COLUMN trace_parent text NOT NULL DEFAULT '';
