-- Alerts of exhausted windows: 'exhausted' (threshold 0) is logged on the
-- first retryable refusal of a reservation, once per (limit, subject,
-- window); every earlier alert is a threshold crossing. An alert keeps its
-- limit's metric (what used and max count), known for the earlier ones
-- while their limit is there.
ALTER TABLE alerts ADD COLUMN IF NOT EXISTS kind TEXT NOT NULL DEFAULT 'threshold';
ALTER TABLE alerts ADD COLUMN IF NOT EXISTS metric TEXT NOT NULL DEFAULT '';
UPDATE alerts SET metric = COALESCE((SELECT metric FROM limits WHERE limits.id = alerts.limit_id), '');
