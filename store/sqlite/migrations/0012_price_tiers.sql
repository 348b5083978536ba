-- Prices by service tier and prompt size: a model's price is rows keyed
-- by tier ('' standard, 'flex', 'priority', 'batch', ...) and above_input
-- (0, or the prompt tokens a long-context row applies above). SQLite
-- cannot change a primary key: the table is rebuilt, every version kept
-- as the standard tier's base row.
CREATE TABLE prices_v12 (
    provider    TEXT    NOT NULL,
    model       TEXT    NOT NULL,
    tier        TEXT    NOT NULL DEFAULT '',
    above_input INTEGER NOT NULL DEFAULT 0,
    from_at     INTEGER NOT NULL,
    input       INTEGER NOT NULL,
    output      INTEGER NOT NULL,
    cache_read  INTEGER NOT NULL,
    cache_write INTEGER NOT NULL,
    reasoning   INTEGER NOT NULL,
    PRIMARY KEY (provider, model, tier, above_input, from_at)
) WITHOUT ROWID;
INSERT INTO prices_v12 (provider, model, from_at, input, output, cache_read, cache_write, reasoning)
    SELECT provider, model, from_at, input, output, cache_read, cache_write, reasoning FROM prices;
DROP TABLE prices;
ALTER TABLE prices_v12 RENAME TO prices;
