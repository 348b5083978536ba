-- Daily rollups, kept with the events; events know whether a price matched
-- (before, only those under a usd limit did: unpriced). The current schema
-- follows, then the rollups are built from the history so far (in Go).
ALTER TABLE usage ADD COLUMN no_price INTEGER NOT NULL DEFAULT 0;
UPDATE usage SET no_price = unpriced WHERE unpriced <> 0;
