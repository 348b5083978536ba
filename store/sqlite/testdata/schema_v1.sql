-- tokenbudget schema for SQLite. Instants are INTEGER Unix nanoseconds (UTC).
-- The schema version lives in PRAGMA user_version; see the migrations in store/.

-- limits: one budget rule. Its identity is (key, scope, scope_value, metric, window).
CREATE TABLE IF NOT EXISTS limits (
    id             TEXT    PRIMARY KEY,
    key            TEXT    NOT NULL,
    scope          TEXT    NOT NULL CHECK (scope IN ('global', 'provider', 'model')),
    scope_value    TEXT    NOT NULL DEFAULT '',
    metric         TEXT    NOT NULL CHECK (metric IN ('tokens', 'input', 'output', 'requests', 'concurrent')),
    max            INTEGER NOT NULL CHECK (max > 0),
    window         TEXT    NOT NULL DEFAULT '',   -- canonical name; '' for concurrent
    window_seconds INTEGER NOT NULL DEFAULT 0,    -- fixed length; 0 for calendar windows
    reset_time     INTEGER NOT NULL DEFAULT 0,    -- minutes after midnight (calendar)
    timezone       TEXT    NOT NULL DEFAULT '',   -- IANA zone (calendar)
    enabled        INTEGER NOT NULL DEFAULT 1,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    UNIQUE (key, scope, scope_value, metric, window)
);

-- usage: the append-only history every counter can be rebuilt from.
CREATE TABLE IF NOT EXISTS usage (
    key         TEXT    NOT NULL,
    request_id  TEXT    NOT NULL,
    provider    TEXT    NOT NULL DEFAULT '',
    model       TEXT    NOT NULL DEFAULT '',
    input       INTEGER NOT NULL DEFAULT 0,
    output      INTEGER NOT NULL DEFAULT 0,
    reasoning   INTEGER NOT NULL DEFAULT 0,
    cache_read  INTEGER NOT NULL DEFAULT 0,
    cache_write INTEGER NOT NULL DEFAULT 0,
    at          INTEGER NOT NULL,
    PRIMARY KEY (key, request_id)
) WITHOUT ROWID;
-- Covering index: seeding a cold window reads only this index, never the table.
CREATE INDEX IF NOT EXISTS usage_window ON usage (key, at, provider, model, input, output, reasoning);

-- counters: a limit's usage in one window; always equal to the history's sum.
CREATE TABLE IF NOT EXISTS counters (
    limit_id     TEXT    NOT NULL REFERENCES limits (id) ON DELETE CASCADE,
    window_start INTEGER NOT NULL,
    window_end   INTEGER NOT NULL,
    used         INTEGER NOT NULL,
    PRIMARY KEY (limit_id, window_start)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS rollovers (
    limit_id          TEXT    NOT NULL REFERENCES limits (id) ON DELETE CASCADE,
    window_start      INTEGER NOT NULL,
    prev_window_start INTEGER NOT NULL,
    prev_used         INTEGER NOT NULL,
    logged_at         INTEGER NOT NULL,
    PRIMARY KEY (limit_id, window_start)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS rollovers_logged ON rollovers (logged_at);

CREATE TABLE IF NOT EXISTS reservations (
    id          TEXT    PRIMARY KEY,
    key         TEXT    NOT NULL,
    provider    TEXT    NOT NULL DEFAULT '',
    model       TEXT    NOT NULL DEFAULT '',
    est_tokens  INTEGER NOT NULL DEFAULT 0,
    est_input   INTEGER NOT NULL DEFAULT 0,
    est_output  INTEGER NOT NULL DEFAULT 0,
    at          INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('live', 'committed', 'released', 'expired')),
    settled_at  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS reservations_live ON reservations (state, expires_at);
CREATE INDEX IF NOT EXISTS reservations_settled ON reservations (settled_at) WHERE state <> 'live';

-- holds: what a live reservation holds on each limit; leases have window_start 0.
CREATE TABLE IF NOT EXISTS holds (
    reservation_id TEXT    NOT NULL REFERENCES reservations (id) ON DELETE CASCADE,
    limit_id       TEXT    NOT NULL REFERENCES limits (id) ON DELETE CASCADE,
    window_start   INTEGER NOT NULL,
    amount         INTEGER NOT NULL,
    expires_at     INTEGER NOT NULL,
    PRIMARY KEY (reservation_id, limit_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS holds_by_limit ON holds (limit_id, window_start, expires_at, amount);

CREATE TABLE IF NOT EXISTS providers (
    provider       TEXT    PRIMARY KEY,
    kind           TEXT    NOT NULL CHECK (kind IN ('rate_limited', 'overloaded', 'auth_missing')),
    parked_at      INTEGER NOT NULL,
    retry_after    INTEGER NOT NULL,  -- nanoseconds
    resume_at      INTEGER NOT NULL,
    affected       TEXT    NOT NULL DEFAULT '',  -- newline-separated labels
    probe_failures INTEGER NOT NULL DEFAULT 0,
    probe_owner    TEXT    NOT NULL DEFAULT '',
    probe_until    INTEGER NOT NULL DEFAULT 0
);

-- gateway_keys: proxy credentials; only the SHA-256 of the secret is kept.
CREATE TABLE IF NOT EXISTS gateway_keys (
    name       TEXT    PRIMARY KEY,
    hash       TEXT    NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER NOT NULL DEFAULT 0
);

-- meta: limits_version moves on every change to limits, so a writer can
-- confirm inside its transaction that the definitions it holds are current.
CREATE TABLE IF NOT EXISTS meta (
    name  TEXT    PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT OR IGNORE INTO meta (name, value) VALUES ('limits_version', 0);
CREATE TRIGGER IF NOT EXISTS limits_ins AFTER INSERT ON limits
BEGIN UPDATE meta SET value = value + 1 WHERE name = 'limits_version'; END;
CREATE TRIGGER IF NOT EXISTS limits_upd AFTER UPDATE ON limits
BEGIN UPDATE meta SET value = value + 1 WHERE name = 'limits_version'; END;
CREATE TRIGGER IF NOT EXISTS limits_del AFTER DELETE ON limits
BEGIN UPDATE meta SET value = value + 1 WHERE name = 'limits_version'; END;
