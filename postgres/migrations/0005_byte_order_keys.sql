-- reprise schema version 5: text keys compare as bytes.
--
-- Under a database collation other than "C" (C.UTF-8 and en_US.UTF-8
-- included, up to PostgreSQL 16), every comparison a B-tree makes on a text
-- key goes through the C library's strcoll, on copies of both strings made
-- to terminate them. Run ids, step and workflow names are identifiers, not
-- prose: byte order serves every index on them, is the order the SQLite
-- store lists runs in, and costs a memcmp. Equality is the same under both,
-- so no lookup finds anything else; only RunList's tie-break on ids of one
-- creation time can come out in another order, and now it is the same as
-- SQLite's. Changing a column's collation keeps its rows and rebuilds its
-- indexes.
ALTER TABLE reprise_run
    ALTER COLUMN id TYPE text COLLATE "C",
    ALTER COLUMN workflow TYPE text COLLATE "C",
    ALTER COLUMN status TYPE text COLLATE "C",
    ALTER COLUMN owner TYPE text COLLATE "C",
    ALTER COLUMN parent_id TYPE text COLLATE "C";
ALTER TABLE reprise_event
    ALTER COLUMN run_id TYPE text COLLATE "C",
    ALTER COLUMN type TYPE text COLLATE "C";
ALTER TABLE reprise_task
    ALTER COLUMN run_id TYPE text COLLATE "C",
    ALTER COLUMN step TYPE text COLLATE "C",
    ALTER COLUMN owner TYPE text COLLATE "C";
ALTER TABLE reprise_step_failed
    ALTER COLUMN run_id TYPE text COLLATE "C";
ALTER TABLE reprise_timer
    ALTER COLUMN run_id TYPE text COLLATE "C";
