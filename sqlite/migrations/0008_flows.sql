-- reprise schema, version 8: declarative flows.
--
-- flows: every version of every flow kept as data (the HTTP API's POST
-- /v1/flows). A version is never changed: a new flow is a new version,
-- numbered from 1 per name. flow is the flow's canonical JSON, kept as
-- text byte for byte, so that the same flow put again is seen as the same.
-- The latest version of a name is its greatest.
CREATE TABLE flows (
	name       TEXT NOT NULL,
	version    INTEGER NOT NULL,
	flow       TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (name, version)
) WITHOUT ROWID;
