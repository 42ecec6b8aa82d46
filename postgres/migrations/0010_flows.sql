-- reprise schema version 10: declarative flows.
--
-- Every version of every flow kept as data (the HTTP API's POST
-- /v1/flows). A version is never changed: a new flow is a new version,
-- numbered from 1 per name. flow is the flow's canonical JSON, kept as
-- text byte for byte (jsonb would reorder its keys), so that the same flow
-- put again is seen as the same. The latest version of a name is its
-- greatest.
CREATE TABLE reprise_flow (
    name       text COLLATE "C" NOT NULL,
    version    integer     NOT NULL,
    flow       text        NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (name, version)
);
