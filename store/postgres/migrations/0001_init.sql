-- tokenbudget schema for PostgreSQL, version 1. Instants are BIGINT Unix
-- nanoseconds (UTC), 0 for "none", exactly as in the SQLite schema, so the
-- two backends store the same numbers. Applied in one transaction by Open;
-- the version lives in schema_version.

-- limits: one budget rule. Its identity is (key, scope, scope_value, metric, window).
CREATE TABLE limits (
    id             TEXT    PRIMARY KEY,
    key            TEXT    NOT NULL,
    scope          TEXT    NOT NULL CHECK (scope IN ('global', 'provider', 'model')),
    scope_value    TEXT    NOT NULL DEFAULT '',
    metric         TEXT    NOT NULL CHECK (metric IN ('tokens', 'input', 'output', 'requests', 'concurrent')),
    max            BIGINT  NOT NULL CHECK (max > 0),
    "window"       TEXT    NOT NULL DEFAULT '',   -- canonical name; '' for concurrent
    window_seconds BIGINT  NOT NULL DEFAULT 0,    -- fixed length; 0 for calendar windows
    reset_time     INTEGER NOT NULL DEFAULT 0,    -- minutes after midnight (calendar)
    timezone       TEXT    NOT NULL DEFAULT '',   -- IANA zone (calendar)
    enabled        BOOLEAN NOT NULL DEFAULT TRUE,
    created_at     BIGINT  NOT NULL,
    updated_at     BIGINT  NOT NULL,
    UNIQUE (key, scope, scope_value, metric, "window")
);

-- usage: the append-only history every counter can be rebuilt from.
CREATE TABLE usage (
    key         TEXT   NOT NULL,
    request_id  TEXT   NOT NULL,
    provider    TEXT   NOT NULL DEFAULT '',
    model       TEXT   NOT NULL DEFAULT '',
    input       BIGINT NOT NULL DEFAULT 0,
    output      BIGINT NOT NULL DEFAULT 0,
    reasoning   BIGINT NOT NULL DEFAULT 0,
    cache_read  BIGINT NOT NULL DEFAULT 0,
    cache_write BIGINT NOT NULL DEFAULT 0,
    at          BIGINT NOT NULL,
    PRIMARY KEY (key, request_id)
);
-- Covering index: seeding a cold window can be an index-only scan.
CREATE INDEX usage_window ON usage (key, at) INCLUDE (provider, model, input, output, reasoning);

-- counters: a limit's usage in one window; always equal to the history's sum.
CREATE TABLE counters (
    limit_id     TEXT   NOT NULL REFERENCES limits (id) ON DELETE CASCADE,
    window_start BIGINT NOT NULL,
    window_end   BIGINT NOT NULL,
    used         BIGINT NOT NULL,
    PRIMARY KEY (limit_id, window_start)
);

CREATE TABLE rollovers (
    limit_id          TEXT   NOT NULL REFERENCES limits (id) ON DELETE CASCADE,
    window_start      BIGINT NOT NULL,
    prev_window_start BIGINT NOT NULL,
    prev_used         BIGINT NOT NULL,
    logged_at         BIGINT NOT NULL,
    PRIMARY KEY (limit_id, window_start)
);
CREATE INDEX rollovers_logged ON rollovers (logged_at);

CREATE TABLE reservations (
    id          TEXT   PRIMARY KEY,
    key         TEXT   NOT NULL,
    provider    TEXT   NOT NULL DEFAULT '',
    model       TEXT   NOT NULL DEFAULT '',
    est_tokens  BIGINT NOT NULL DEFAULT 0,
    est_input   BIGINT NOT NULL DEFAULT 0,
    est_output  BIGINT NOT NULL DEFAULT 0,
    at          BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL,
    state       TEXT   NOT NULL CHECK (state IN ('live', 'committed', 'released', 'expired')),
    settled_at  BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX reservations_live ON reservations (expires_at, id) WHERE state = 'live';
CREATE INDEX reservations_settled ON reservations (settled_at) WHERE state <> 'live';

-- holds: what a live reservation holds on each limit; leases have window_start 0.
CREATE TABLE holds (
    reservation_id TEXT   NOT NULL REFERENCES reservations (id) ON DELETE CASCADE,
    limit_id       TEXT   NOT NULL REFERENCES limits (id) ON DELETE CASCADE,
    window_start   BIGINT NOT NULL,
    amount         BIGINT NOT NULL,
    expires_at     BIGINT NOT NULL,
    PRIMARY KEY (reservation_id, limit_id)
);
CREATE INDEX holds_by_limit ON holds (limit_id, window_start, expires_at) INCLUDE (amount, reservation_id);

CREATE TABLE providers (
    provider       TEXT    PRIMARY KEY,
    kind           TEXT    NOT NULL CHECK (kind IN ('rate_limited', 'overloaded', 'auth_missing')),
    parked_at      BIGINT  NOT NULL,
    retry_after    BIGINT  NOT NULL,  -- nanoseconds
    resume_at      BIGINT  NOT NULL,
    affected       TEXT    NOT NULL DEFAULT '',  -- newline-separated labels
    probe_failures INTEGER NOT NULL DEFAULT 0,
    probe_owner    TEXT    NOT NULL DEFAULT '',
    probe_until    BIGINT  NOT NULL DEFAULT 0
);

-- gateway_keys: proxy credentials; only the SHA-256 of the secret is kept.
CREATE TABLE gateway_keys (
    name       TEXT   PRIMARY KEY,
    hash       TEXT   NOT NULL UNIQUE,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT NOT NULL DEFAULT 0
);

-- meta: limits_version moves on every change to limits, so a writer can
-- confirm inside its transaction that the definitions it holds are current.
CREATE TABLE meta (
    name  TEXT   PRIMARY KEY,
    value BIGINT NOT NULL
);
INSERT INTO meta (name, value) VALUES ('limits_version', 0);

-- Before any statement changes limits, take the schema's limits lock
-- exclusively and bump the version. Every write transaction that uses limit
-- definitions holds the same lock shared from the moment it reads the
-- version (see LimitsVersion), so a definition never changes under a
-- transaction that already resolved it, and the lock order (limits lock,
-- then rows) is the same everywhere.
CREATE FUNCTION tokenbudget_limits_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(1952609636, hashtext(TG_TABLE_SCHEMA));
    EXECUTE format('UPDATE %I.meta SET value = value + 1 WHERE name = %L', TG_TABLE_SCHEMA, 'limits_version');
    RETURN NULL;
END
$$;
CREATE TRIGGER limits_version BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON limits
    FOR EACH STATEMENT EXECUTE FUNCTION tokenbudget_limits_changed();

-- The writers' side in one round trip: take the lock shared, then read the
-- version. A VOLATILE function's queries each take a new snapshot, so the
-- read sees a change that committed while the lock was waited for.
CREATE FUNCTION tokenbudget_limits_version(lock_key integer) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1952609636, lock_key);
    RETURN (SELECT value FROM meta WHERE name = 'limits_version');
END
$$;
