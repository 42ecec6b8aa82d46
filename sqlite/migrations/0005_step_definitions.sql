-- reprise schema, version 5: step definitions, and the version a task was
-- scheduled under.
--
-- step_definitions: every version of every step defined as data (the HTTP
-- API's http and pull steps). A definition is never changed: a new one is
-- a new version, numbered from 1 per name without reuse. Deleting a step
-- sets deleted_at on its versions, which stay, so that a task scheduled
-- under one still finds it and the next definition takes the next
-- number. The current version of a name is its greatest, unless deleted.
-- policy is the canonical text form, '' for the engine's default.
CREATE TABLE step_definitions (
	name       TEXT NOT NULL,
	version    INTEGER NOT NULL,
	kind       TEXT NOT NULL,
	url        TEXT NOT NULL DEFAULT '',
	policy     TEXT NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	deleted_at INTEGER,
	PRIMARY KEY (name, version)
) WITHOUT ROWID;

-- step_version: the version of the step's definition it was scheduled
-- under, 0 for a step without one. A failed step keeps it for a redrive.
ALTER TABLE tasks ADD COLUMN step_version INTEGER NOT NULL DEFAULT 0;
ALTER TABLE failed_steps ADD COLUMN step_version INTEGER NOT NULL DEFAULT 0;
