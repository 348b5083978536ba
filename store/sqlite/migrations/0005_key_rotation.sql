-- Gateway keys can be rotated (with a grace period) and record their last
-- use.
ALTER TABLE gateway_keys ADD COLUMN prev_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE gateway_keys ADD COLUMN prev_until INTEGER NOT NULL DEFAULT 0;
ALTER TABLE gateway_keys ADD COLUMN last_used_at INTEGER NOT NULL DEFAULT 0;
CREATE INDEX gateway_keys_prev ON gateway_keys (prev_hash) WHERE prev_hash <> '';
