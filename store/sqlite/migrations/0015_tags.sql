-- Budgets by tag: events, rollups and reservations carry the request's
-- tags (normalized, "name=value,..."; '' for none), and a limit may have
-- scope 'tag'. SQLite cannot change a CHECK constraint in place: limits is
-- rebuilt, and with it the tables that reference it (created against the
-- new table and filled before the old ones are dropped, children first, so
-- no drop cascades into a kept row; renaming the new one rewrites their
-- references). The rollups' identity gains the tags: rebuilt too.
CREATE TABLE limits_v15 (
    id             TEXT    PRIMARY KEY,
    key            TEXT    NOT NULL,
    team           TEXT    NOT NULL DEFAULT '',
    org            TEXT    NOT NULL DEFAULT '',
    scope          TEXT    NOT NULL CHECK (scope IN ('global', 'provider', 'model', 'user', 'tag')),
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
    alerts         TEXT    NOT NULL DEFAULT '',
    UNIQUE (key, team, org, scope, scope_value, metric, window)
);
INSERT INTO limits_v15 (id, key, team, org, scope, scope_value, metric, max, window, window_seconds, reset_time, timezone, enabled, created_at, updated_at, alerts)
    SELECT id, key, team, org, scope, scope_value, metric, max, window, window_seconds, reset_time, timezone, enabled, created_at, updated_at, alerts FROM limits;
CREATE TABLE raises_v15 (
    id         TEXT    PRIMARY KEY,
    limit_id   TEXT    NOT NULL REFERENCES limits_v15 (id) ON DELETE CASCADE,
    amount     INTEGER NOT NULL CHECK (amount > 0),
    until      INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL
);
INSERT INTO raises_v15 (id, limit_id, amount, until, created_at) SELECT id, limit_id, amount, until, created_at FROM raises;
CREATE TABLE counters_v15 (
    limit_id     TEXT    NOT NULL REFERENCES limits_v15 (id) ON DELETE CASCADE,
    subject      TEXT    NOT NULL DEFAULT '',
    window_start INTEGER NOT NULL,
    window_end   INTEGER NOT NULL,
    used         INTEGER NOT NULL,
    PRIMARY KEY (limit_id, subject, window_start)
) WITHOUT ROWID;
INSERT INTO counters_v15 (limit_id, subject, window_start, window_end, used)
    SELECT limit_id, subject, window_start, window_end, used FROM counters;
CREATE TABLE rollovers_v15 (
    limit_id          TEXT    NOT NULL REFERENCES limits_v15 (id) ON DELETE CASCADE,
    subject           TEXT    NOT NULL DEFAULT '',
    window_start      INTEGER NOT NULL,
    prev_window_start INTEGER NOT NULL,
    prev_used         INTEGER NOT NULL,
    logged_at         INTEGER NOT NULL,
    PRIMARY KEY (limit_id, subject, window_start)
) WITHOUT ROWID;
INSERT INTO rollovers_v15 (limit_id, subject, window_start, prev_window_start, prev_used, logged_at)
    SELECT limit_id, subject, window_start, prev_window_start, prev_used, logged_at FROM rollovers;
CREATE TABLE holds_v15 (
    limit_id       TEXT    NOT NULL REFERENCES limits_v15 (id) ON DELETE CASCADE,
    subject        TEXT    NOT NULL DEFAULT '',
    window_start   INTEGER NOT NULL,
    reservation_id TEXT    NOT NULL,
    amount         INTEGER NOT NULL,
    expires_at     INTEGER NOT NULL,
    PRIMARY KEY (limit_id, subject, window_start, reservation_id)
) WITHOUT ROWID;
INSERT INTO holds_v15 (limit_id, subject, window_start, reservation_id, amount, expires_at)
    SELECT limit_id, subject, window_start, reservation_id, amount, expires_at FROM holds;
DROP TABLE holds;
DROP TABLE rollovers;
DROP TABLE counters;
DROP TABLE raises;
DROP TABLE limits;
ALTER TABLE limits_v15 RENAME TO limits;
ALTER TABLE raises_v15 RENAME TO raises;
ALTER TABLE counters_v15 RENAME TO counters;
ALTER TABLE rollovers_v15 RENAME TO rollovers;
ALTER TABLE holds_v15 RENAME TO holds;
CREATE INDEX raises_limit ON raises (limit_id);
CREATE INDEX rollovers_logged ON rollovers (logged_at);
CREATE TRIGGER limits_ins AFTER INSERT ON limits
BEGIN UPDATE meta SET value = value + 1 WHERE name = 'limits_version'; END;
CREATE TRIGGER limits_upd AFTER UPDATE ON limits
BEGIN UPDATE meta SET value = value + 1 WHERE name = 'limits_version'; END;
CREATE TRIGGER limits_del AFTER DELETE ON limits
BEGIN UPDATE meta SET value = value + 1 WHERE name = 'limits_version'; END;
CREATE TRIGGER raises_ins AFTER INSERT ON raises
BEGIN UPDATE meta SET value = value + 1 WHERE name = 'limits_version'; END;
CREATE TRIGGER raises_del AFTER DELETE ON raises
BEGIN UPDATE meta SET value = value + 1 WHERE name = 'limits_version'; END;

CREATE TABLE rollups_v15 (
    day         INTEGER NOT NULL,
    key         TEXT    NOT NULL,
    team        TEXT    NOT NULL DEFAULT '',
    org         TEXT    NOT NULL DEFAULT '',
    end_user    TEXT    NOT NULL DEFAULT '',
    provider    TEXT    NOT NULL DEFAULT '',
    model       TEXT    NOT NULL DEFAULT '',
    tags        TEXT    NOT NULL DEFAULT '',
    model_norm  TEXT    NOT NULL DEFAULT '',
    requests    INTEGER NOT NULL DEFAULT 0,
    input       INTEGER NOT NULL DEFAULT 0,
    output      INTEGER NOT NULL DEFAULT 0,
    reasoning   INTEGER NOT NULL DEFAULT 0,
    cache_read  INTEGER NOT NULL DEFAULT 0,
    cache_write INTEGER NOT NULL DEFAULT 0,
    cost        INTEGER NOT NULL DEFAULT 0,
    no_price    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (day, key, team, org, end_user, provider, model, tags)
) WITHOUT ROWID;
INSERT INTO rollups_v15 (day, key, team, org, end_user, provider, model, model_norm, requests, input, output, reasoning, cache_read, cache_write, cost, no_price)
    SELECT day, key, team, org, end_user, provider, model, model_norm, requests, input, output, reasoning, cache_read, cache_write, cost, no_price FROM rollups;
DROP TABLE rollups;
ALTER TABLE rollups_v15 RENAME TO rollups;
-- usage.tags and reservations.tags are added in Go (addTags).
