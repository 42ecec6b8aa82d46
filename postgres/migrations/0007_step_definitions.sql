-- reprise schema version 7: step definitions, and the version a task was
-- scheduled under.
--
-- Every version of every step defined as data (the HTTP API's http and
-- pull steps). A definition is never changed: a new one is a new version,
-- numbered from 1 per name without reuse. Deleting a step sets deleted_at
-- on its versions, which stay, so that a task scheduled under one still
-- finds it and the next definition takes the next number. The current
-- version of a name is its greatest, unless deleted. policy is the
-- canonical text form, '' for the engine's default.
CREATE TABLE reprise_step_def (
    name       text COLLATE "C" NOT NULL,
    version    integer     NOT NULL,
    kind       text        NOT NULL,
    url        text        NOT NULL DEFAULT '',
    policy     text        NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL,
    deleted_at timestamptz,
    PRIMARY KEY (name, version)
);

-- step_version: the version of the step's definition it was scheduled
-- under, 0 for a step without one. A failed step keeps it for a redrive.
ALTER TABLE reprise_task ADD COLUMN step_version integer NOT NULL DEFAULT 0;
ALTER TABLE reprise_step_failed ADD COLUMN step_version integer NOT NULL DEFAULT 0;
