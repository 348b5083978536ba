-- Prices by service tier and prompt size: a model's price is rows keyed
-- by tier ('' standard, 'flex', 'priority', 'batch', ...) and above_input
-- (0, or the prompt tokens a long-context row applies above); every
-- version stored before is the standard tier's base row.
ALTER TABLE prices ADD COLUMN IF NOT EXISTS tier TEXT NOT NULL DEFAULT '';
ALTER TABLE prices ADD COLUMN IF NOT EXISTS above_input BIGINT NOT NULL DEFAULT 0;
ALTER TABLE prices DROP CONSTRAINT IF EXISTS prices_pkey;
ALTER TABLE prices ADD PRIMARY KEY (provider, model, tier, above_input, from_at);
