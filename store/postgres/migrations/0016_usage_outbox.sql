-- The usage outbox.

-- usage_hooks: where every recorded usage event is delivered (a webhook's
-- URL or a library hook's name). While one is here, every transaction
-- that inserts events queues them for it in usage_outbox. A change to it
-- takes the limits lock exclusively and moves limits_version, as a change
-- to limits does (tokenbudget_limits_changed, migration 1): a writer that
-- read the version under the shared lock queues for every hook committed
-- before it, and a hook added after waits for it to end.
CREATE TABLE usage_hooks (
    name       TEXT   PRIMARY KEY,
    created_at BIGINT NOT NULL
);
CREATE TRIGGER limits_version BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON usage_hooks
    FOR EACH STATEMENT EXECUTE FUNCTION tokenbudget_limits_changed();

-- usage_outbox: the events not yet delivered, one row per (hook, event),
-- queued in the event's own transaction; seq orders a key's rows (of two
-- overlapping transactions either may commit first: they have no order to
-- keep). A row goes once delivered; the payload is read from usage then.
CREATE TABLE usage_outbox (
    seq          BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dest         TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    request_id   TEXT    NOT NULL,
    at           BIGINT  NOT NULL,            -- the event's instant: prune keeps what is queued
    queued_at    BIGINT  NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,  -- failed deliveries
    next_attempt BIGINT  NOT NULL DEFAULT 0,
    claim_owner  TEXT    NOT NULL DEFAULT '',
    claim_until  BIGINT  NOT NULL DEFAULT 0,
    last_error   TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX usage_outbox_key ON usage_outbox (dest, key, seq);
CREATE INDEX usage_outbox_dest ON usage_outbox (dest, seq);
