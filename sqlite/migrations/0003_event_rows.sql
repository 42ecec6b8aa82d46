-- reprise schema, version 3: events in the order they were written, and a
-- row of events for what one write appended.
--
-- Version 2 clustered events by (run_id, seq), so a run's end went into the
-- middle of the table, among the runs started after it, and its pages,
-- holding a few large rows each, were split over and over. Now the table
-- is in rowid order, where every append lands at the end, and the small
-- entries of events_run find a run's history.
--
-- A write (a transition) appends its events as one row: SQLite's work per
-- row, its key and columns, was most of what an append cost. A row's seq is
-- its last event's, so the last seq of a run is still its greatest, and a
-- read after a seq starts at the right row. A row's body is its one event,
-- as in version 2, whose seq and execution are the row's columns, or a JSON
-- array of its events, numbered up to the row's seq, each of the row's
-- execution unless it names another; the type and execution columns are
-- those of its last event. The rows of version 2 are rows of one event.
CREATE TABLE events_v3 (
	id        INTEGER PRIMARY KEY,
	run_id    TEXT NOT NULL,
	seq       INTEGER NOT NULL,
	execution INTEGER NOT NULL,
	type      TEXT NOT NULL,
	at        INTEGER NOT NULL,
	body      BLOB NOT NULL
);
INSERT INTO events_v3 (run_id, seq, execution, type, at, body)
	SELECT run_id, seq, execution, type, at, body FROM events ORDER BY at, run_id, seq;
DROP TABLE events;
ALTER TABLE events_v3 RENAME TO events;
CREATE UNIQUE INDEX events_run ON events (run_id, seq);
