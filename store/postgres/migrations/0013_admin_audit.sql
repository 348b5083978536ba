-- The admin API's state: admin tokens, the audit log, and each gateway
-- key's expiry and allowed models.
ALTER TABLE gateway_keys ADD COLUMN IF NOT EXISTS expires_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE gateway_keys ADD COLUMN IF NOT EXISTS models TEXT NOT NULL DEFAULT '';

CREATE TABLE IF NOT EXISTS admin_tokens (
    name       TEXT    PRIMARY KEY,
    hash       TEXT    NOT NULL UNIQUE,
    team       TEXT    NOT NULL DEFAULT '',
    org        TEXT    NOT NULL DEFAULT '',
    read_only  INTEGER NOT NULL DEFAULT 0,
    created_at BIGINT  NOT NULL,
    revoked_at BIGINT  NOT NULL DEFAULT 0
);

CREATE TABLE IF NOT EXISTS audit (
    seq         BIGSERIAL PRIMARY KEY,
    id          TEXT   NOT NULL UNIQUE,
    at          BIGINT NOT NULL,
    actor_kind  TEXT   NOT NULL,
    actor_name  TEXT   NOT NULL DEFAULT '',
    action      TEXT   NOT NULL,
    object_kind TEXT   NOT NULL,
    object_id   TEXT   NOT NULL,
    team        TEXT   NOT NULL DEFAULT '',
    org         TEXT   NOT NULL DEFAULT '',
    was_team    TEXT   NOT NULL DEFAULT '',
    was_org     TEXT   NOT NULL DEFAULT '',
    before_json TEXT   NOT NULL DEFAULT '',
    after_json  TEXT   NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS audit_at ON audit (at);
