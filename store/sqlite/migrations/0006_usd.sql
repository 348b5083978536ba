-- Budgets in dollars: prices, costs and a metric per limit (the rest in
-- Go: migrate_usd.go).
CREATE TABLE prices (
provider    TEXT    NOT NULL,
model       TEXT    NOT NULL,
from_at     INTEGER NOT NULL,
input       INTEGER NOT NULL,
output      INTEGER NOT NULL,
cache_read  INTEGER NOT NULL,
cache_write INTEGER NOT NULL,
reasoning   INTEGER NOT NULL,
PRIMARY KEY (provider, model, from_at)
) WITHOUT ROWID;
INSERT OR IGNORE INTO meta (name, value) VALUES ('prices_version', 0);
ALTER TABLE usage ADD COLUMN cost INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage ADD COLUMN unpriced INTEGER NOT NULL DEFAULT 0;
DROP INDEX usage_window;
CREATE INDEX usage_window ON usage (key, at, provider, model_norm, input, output, reasoning, cost);
