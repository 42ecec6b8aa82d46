-- reprise schema, version 6: the engines that run on this database.
--
-- An engine records its worker id as it starts and removes it as it stops
-- cleanly. A row whose engine is not live in the process that has the
-- database open (one process per file) is a crashed engine's: its leases
-- are released at once rather than when they lapse.
CREATE TABLE engines (
	id         TEXT PRIMARY KEY,
	started_at INTEGER NOT NULL
) WITHOUT ROWID;
