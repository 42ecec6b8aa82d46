-- reprise schema, version 8: the engines that run on this database.
--
-- An engine records its worker id as it starts and holds a session-level
-- advisory lock on lock_key for as long as it lives; PostgreSQL releases
-- the lock when the engine's connection ends, kill -9 included. A row
-- whose lock nobody holds is a crashed engine's: another engine releases
-- its leases at once rather than when they lapse, and removes the row.
CREATE TABLE reprise_engine (
    id         text        COLLATE "C" PRIMARY KEY,
    lock_key   bigint      NOT NULL,
    started_at timestamptz NOT NULL
);
