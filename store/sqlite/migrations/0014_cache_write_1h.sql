-- Cache writes priced by lifetime: prices.cache_write_1h prices a write to
-- a 1-hour cache, cache_write the 5-minute one (added in Go, unless the
-- schema made the table with it). Every version stored before has no
-- 1-hour price, so it prices every cache write at cache_write.
SELECT 1;
