-- The admin API's state: admin tokens and the audit log (created by the
-- current schema, run after this file), and each gateway key's expiry and
-- allowed models (added in Go, unless the schema made the table with them).
SELECT 1;
