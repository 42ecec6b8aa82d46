-- reprise schema version 3: no index on event types.
--
-- No query of the store reads events across runs by type, and every
-- appended event paid an entry in this index: a deployment whose
-- dashboards need it can create it in its own migrations.
DROP INDEX reprise_event_type;
