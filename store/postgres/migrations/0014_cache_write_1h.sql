-- Cache writes priced by lifetime: cache_write_1h prices a write to a
-- 1-hour cache, cache_write the 5-minute one. Every version stored before
-- has no 1-hour price, so it prices every cache write at cache_write.
ALTER TABLE prices ADD COLUMN IF NOT EXISTS cache_write_1h BIGINT;
UPDATE prices SET cache_write_1h = cache_write WHERE cache_write_1h IS NULL;
ALTER TABLE prices ALTER COLUMN cache_write_1h SET NOT NULL;
