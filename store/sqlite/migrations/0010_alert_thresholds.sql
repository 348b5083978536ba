-- Alert thresholds on limits and the alerts outbox (the current schema
-- follows).
ALTER TABLE limits ADD COLUMN alerts TEXT NOT NULL DEFAULT '';
