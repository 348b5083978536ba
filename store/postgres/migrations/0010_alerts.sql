-- Alert thresholds on limits and the alerts outbox.

-- alerts: the thresholds of a limit in percent of its effective maximum,
-- "50,80,100" ('' for none). Like every change to limits, setting them
-- moves limits_version (the trigger of migration 1).
ALTER TABLE limits ADD COLUMN IF NOT EXISTS alerts TEXT NOT NULL DEFAULT '';

-- alerts: an outbox of threshold crossings, logged with the usage that
-- crossed them, once per (limit, subject, window, threshold); delivered at
-- least once by whichever deliverer holds its claim (claim_owner until
-- claim_until).
CREATE TABLE alerts (
    id            TEXT    PRIMARY KEY,
    limit_id      TEXT    NOT NULL,  -- kept when the limit goes: it is history
    level         TEXT    NOT NULL,
    owner         TEXT    NOT NULL DEFAULT '',
    subject       TEXT    NOT NULL DEFAULT '',
    window_start  BIGINT  NOT NULL,
    threshold     INTEGER NOT NULL,
    used          BIGINT  NOT NULL,
    max           BIGINT  NOT NULL,
    at            BIGINT  NOT NULL,
    forecast_used BIGINT  NOT NULL DEFAULT -1,  -- -1: none
    exhausts_at   BIGINT  NOT NULL DEFAULT 0,   -- 0: not before the reset
    delivered_at  BIGINT  NOT NULL DEFAULT 0,
    attempts      INTEGER NOT NULL DEFAULT 0,
    next_attempt  BIGINT  NOT NULL DEFAULT 0,
    claim_owner   TEXT    NOT NULL DEFAULT '',
    claim_until   BIGINT  NOT NULL DEFAULT 0,
    UNIQUE (limit_id, subject, window_start, threshold)
);
-- What deliverers claim: the undelivered alerts, oldest due first.
CREATE INDEX alerts_pending ON alerts (next_attempt, at) WHERE delivered_at = 0;
CREATE INDEX alerts_at ON alerts (at);
