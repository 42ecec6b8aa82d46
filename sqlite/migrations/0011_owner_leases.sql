-- reprise schema, version 11: a run's lease is its owner's.
--
-- An engine renews the leases of all its runs at once, so each run's own
-- lapse time was a copy of its owner's: renewing rewrote every active run
-- the engine held, and RunClaim, looking for lapsed leases, read every
-- active run. run_owners keeps one lapse time per owner instead. A run is
-- free to claim when its owner is '', or once its owner's lease lapsed:
-- RunClaim then releases all that owner's runs in one step. runs_free
-- holds the active runs nobody holds, for RunClaim, oldest first: a run
-- started and run by one engine never enters it, so it costs the runs an
-- engine creates for itself no index write.
CREATE TABLE run_owners (
	owner       TEXT PRIMARY KEY,
	lease_until INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO run_owners (owner, lease_until)
	SELECT owner, max(lease_until) FROM runs
	WHERE owner != '' AND status IN ('pending', 'running') GROUP BY owner;
ALTER TABLE runs DROP COLUMN lease_until;
CREATE INDEX runs_free ON runs (created_at, id) WHERE owner = '' AND status IN ('pending', 'running');
