-- Counters, rollovers and holds carry a subject: the key a default limit
-- (key '') counts for, '' for a key's own limit.
ALTER TABLE counters ADD COLUMN IF NOT EXISTS subject TEXT NOT NULL DEFAULT '';
ALTER TABLE counters DROP CONSTRAINT IF EXISTS counters_pkey;
ALTER TABLE counters ADD PRIMARY KEY (limit_id, subject, window_start);
ALTER TABLE rollovers ADD COLUMN IF NOT EXISTS subject TEXT NOT NULL DEFAULT '';
ALTER TABLE rollovers DROP CONSTRAINT IF EXISTS rollovers_pkey;
ALTER TABLE rollovers ADD PRIMARY KEY (limit_id, subject, window_start);
ALTER TABLE holds ADD COLUMN IF NOT EXISTS subject TEXT NOT NULL DEFAULT '';
DROP INDEX IF EXISTS holds_by_limit;
CREATE INDEX holds_by_limit ON holds (limit_id, subject, window_start, expires_at) INCLUDE (amount, reservation_id);
