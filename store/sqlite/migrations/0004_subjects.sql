-- Counters, rollovers and holds carry a subject, so a default limit counts
-- per key. SQLite cannot change a primary key in place: the two tables are
-- rebuilt.
CREATE TABLE counters_v4 (
	limit_id     TEXT    NOT NULL REFERENCES limits (id) ON DELETE CASCADE,
	subject      TEXT    NOT NULL DEFAULT '',
	window_start INTEGER NOT NULL,
	window_end   INTEGER NOT NULL,
	used         INTEGER NOT NULL,
	PRIMARY KEY (limit_id, subject, window_start)
) WITHOUT ROWID;
INSERT INTO counters_v4 (limit_id, window_start, window_end, used) SELECT limit_id, window_start, window_end, used FROM counters;
DROP TABLE counters;
ALTER TABLE counters_v4 RENAME TO counters;
CREATE TABLE rollovers_v4 (
	limit_id          TEXT    NOT NULL REFERENCES limits (id) ON DELETE CASCADE,
	subject           TEXT    NOT NULL DEFAULT '',
	window_start      INTEGER NOT NULL,
	prev_window_start INTEGER NOT NULL,
	prev_used         INTEGER NOT NULL,
	logged_at         INTEGER NOT NULL,
	PRIMARY KEY (limit_id, subject, window_start)
) WITHOUT ROWID;
INSERT INTO rollovers_v4 (limit_id, window_start, prev_window_start, prev_used, logged_at)
	SELECT limit_id, window_start, prev_window_start, prev_used, logged_at FROM rollovers;
DROP TABLE rollovers;
ALTER TABLE rollovers_v4 RENAME TO rollovers;
CREATE INDEX rollovers_logged ON rollovers (logged_at);
ALTER TABLE holds ADD COLUMN subject TEXT NOT NULL DEFAULT '';
DROP INDEX holds_by_limit;
CREATE INDEX holds_by_limit ON holds (limit_id, subject, window_start, expires_at, amount);
