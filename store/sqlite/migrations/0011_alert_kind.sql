-- Alerts of exhausted windows (alerts.kind), with their limit's metric:
-- added in Go, unless step 10 already made the table from the current
-- schema, which has them.
SELECT 1;
