-- Budgets in dollars: a price table (micro-dollars per million tokens),
-- each event's cost in micro-dollars, and the usd metric.
CREATE TABLE IF NOT EXISTS prices (
    provider    TEXT   NOT NULL,
    model       TEXT   NOT NULL,
    from_at     BIGINT NOT NULL,
    input       BIGINT NOT NULL,
    output      BIGINT NOT NULL,
    cache_read  BIGINT NOT NULL,
    cache_write BIGINT NOT NULL,
    reasoning   BIGINT NOT NULL,
    PRIMARY KEY (provider, model, from_at)
);
INSERT INTO meta (name, value) VALUES ('prices_version', 0) ON CONFLICT DO NOTHING;
ALTER TABLE usage ADD COLUMN IF NOT EXISTS cost BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage ADD COLUMN IF NOT EXISTS unpriced BOOLEAN NOT NULL DEFAULT false;
DROP INDEX IF EXISTS usage_window;
CREATE INDEX usage_window ON usage (key, at) INCLUDE (provider, model_norm, input, output, reasoning, cost);
ALTER TABLE limits DROP CONSTRAINT IF EXISTS limits_metric_check;
ALTER TABLE limits ADD CONSTRAINT limits_metric_check CHECK (metric IN ('tokens', 'input', 'output', 'requests', 'concurrent', 'usd'));
