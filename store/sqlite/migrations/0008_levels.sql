-- Teams, organisations, end users, raises and once windows. A limit's
-- identity gains its team and org, and SQLite cannot change a UNIQUE
-- constraint in place: limits is rebuilt, and with it the tables that
-- reference it (created against the new table, so dropping the old one
-- cascades into nothing; renaming the new one rewrites their references).
-- The current schema follows, and creates what is missing.
CREATE TABLE limits_v8 (
id             TEXT    PRIMARY KEY,
key            TEXT    NOT NULL,
team           TEXT    NOT NULL DEFAULT '',
org            TEXT    NOT NULL DEFAULT '',
scope          TEXT    NOT NULL CHECK (scope IN ('global', 'provider', 'model', 'user')),
scope_value    TEXT    NOT NULL DEFAULT '',
metric         TEXT    NOT NULL CHECK (metric IN ('tokens', 'input', 'output', 'requests', 'concurrent', 'usd')),
max            INTEGER NOT NULL CHECK (max > 0),
window         TEXT    NOT NULL DEFAULT '',
window_seconds INTEGER NOT NULL DEFAULT 0,
reset_time     INTEGER NOT NULL DEFAULT 0,
timezone       TEXT    NOT NULL DEFAULT '',
enabled        INTEGER NOT NULL DEFAULT 1,
created_at     INTEGER NOT NULL,
updated_at     INTEGER NOT NULL,
UNIQUE (key, team, org, scope, scope_value, metric, window)
);
INSERT INTO limits_v8 (id, key, scope, scope_value, metric, max, window, window_seconds, reset_time, timezone, enabled, created_at, updated_at)
SELECT id, key, scope, scope_value, metric, max, window, window_seconds, reset_time, timezone, enabled, created_at, updated_at FROM limits;
CREATE TABLE counters_v8 (
limit_id     TEXT    NOT NULL REFERENCES limits_v8 (id) ON DELETE CASCADE,
subject      TEXT    NOT NULL DEFAULT '',
window_start INTEGER NOT NULL,
window_end   INTEGER NOT NULL,
used         INTEGER NOT NULL,
PRIMARY KEY (limit_id, subject, window_start)
) WITHOUT ROWID;
INSERT INTO counters_v8 (limit_id, subject, window_start, window_end, used)
SELECT limit_id, subject, window_start, window_end, used FROM counters;
CREATE TABLE rollovers_v8 (
limit_id          TEXT    NOT NULL REFERENCES limits_v8 (id) ON DELETE CASCADE,
subject           TEXT    NOT NULL DEFAULT '',
window_start      INTEGER NOT NULL,
prev_window_start INTEGER NOT NULL,
prev_used         INTEGER NOT NULL,
logged_at         INTEGER NOT NULL,
PRIMARY KEY (limit_id, subject, window_start)
) WITHOUT ROWID;
INSERT INTO rollovers_v8 (limit_id, subject, window_start, prev_window_start, prev_used, logged_at)
SELECT limit_id, subject, window_start, prev_window_start, prev_used, logged_at FROM rollovers;
CREATE TABLE holds_v8 (
limit_id       TEXT    NOT NULL REFERENCES limits_v8 (id) ON DELETE CASCADE,
subject        TEXT    NOT NULL DEFAULT '',
window_start   INTEGER NOT NULL,
reservation_id TEXT    NOT NULL,
amount         INTEGER NOT NULL,
expires_at     INTEGER NOT NULL,
PRIMARY KEY (limit_id, subject, window_start, reservation_id)
) WITHOUT ROWID;
INSERT INTO holds_v8 (limit_id, subject, window_start, reservation_id, amount, expires_at)
SELECT limit_id, subject, window_start, reservation_id, amount, expires_at FROM holds;
DROP TABLE holds;
DROP TABLE rollovers;
DROP TABLE counters;
DROP TABLE limits;
ALTER TABLE limits_v8 RENAME TO limits;
ALTER TABLE counters_v8 RENAME TO counters;
ALTER TABLE rollovers_v8 RENAME TO rollovers;
ALTER TABLE holds_v8 RENAME TO holds;
CREATE INDEX rollovers_logged ON rollovers (logged_at);


ALTER TABLE usage ADD COLUMN team TEXT NOT NULL DEFAULT '';
ALTER TABLE usage ADD COLUMN org TEXT NOT NULL DEFAULT '';
ALTER TABLE usage ADD COLUMN end_user TEXT NOT NULL DEFAULT '';
DROP INDEX usage_window;
ALTER TABLE reservations ADD COLUMN team TEXT NOT NULL DEFAULT '';
ALTER TABLE reservations ADD COLUMN org TEXT NOT NULL DEFAULT '';
ALTER TABLE reservations ADD COLUMN end_user TEXT NOT NULL DEFAULT '';
