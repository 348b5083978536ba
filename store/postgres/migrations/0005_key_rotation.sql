-- Gateway keys can be rotated (the previous secret is accepted until
-- prev_until) and record their last use (to within a minute).
ALTER TABLE gateway_keys ADD COLUMN IF NOT EXISTS prev_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE gateway_keys ADD COLUMN IF NOT EXISTS prev_until BIGINT NOT NULL DEFAULT 0;
ALTER TABLE gateway_keys ADD COLUMN IF NOT EXISTS last_used_at BIGINT NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS gateway_keys_prev ON gateway_keys (prev_hash) WHERE prev_hash <> '';
