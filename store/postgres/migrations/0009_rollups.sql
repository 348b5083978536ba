-- Daily rollups, the prune horizon, and whether a price matched an event.

-- no_price: no price matched the event (its cost is 0 and unknown), under
-- a usd limit or not; before, only those under one were marked (unpriced).
ALTER TABLE usage ADD COLUMN IF NOT EXISTS no_price BOOLEAN NOT NULL DEFAULT false;
UPDATE usage SET no_price = true WHERE unpriced;

-- rollups: the history summed per UTC day and (key, team, org, end_user,
-- provider, model), written in the same transaction as the events (Apply);
-- all that remains of the days before the prune horizon. Sums saturate at
-- 2^53-1, as every sum of the history does.
CREATE TABLE rollups (
    day         BIGINT NOT NULL,  -- the UTC midnight starting the day, Unix ns
    key         TEXT   NOT NULL,
    team        TEXT   NOT NULL DEFAULT '',
    org         TEXT   NOT NULL DEFAULT '',
    end_user    TEXT   NOT NULL DEFAULT '',
    provider    TEXT   NOT NULL DEFAULT '',
    model       TEXT   NOT NULL DEFAULT '',  -- as recorded
    model_norm  TEXT   NOT NULL DEFAULT '',  -- normalised: what model limits match
    requests    BIGINT NOT NULL DEFAULT 0,   -- events, late commits' excess not counted
    input       BIGINT NOT NULL DEFAULT 0,
    output      BIGINT NOT NULL DEFAULT 0,
    reasoning   BIGINT NOT NULL DEFAULT 0,
    cache_read  BIGINT NOT NULL DEFAULT 0,
    cache_write BIGINT NOT NULL DEFAULT 0,
    cost        BIGINT NOT NULL DEFAULT 0,   -- micro-dollars
    no_price    BIGINT NOT NULL DEFAULT 0,   -- events no price matched
    PRIMARY KEY (day, key, team, org, end_user, provider, model)
);

-- The rollups of the history so far. The day of an instant is floored,
-- before 1970 too (% truncates towards zero).
INSERT INTO rollups (day, key, team, org, end_user, provider, model, model_norm,
        requests, input, output, reasoning, cache_read, cache_write, cost, no_price)
    SELECT at - ((at % 86400000000000) + 86400000000000) % 86400000000000, key, team, org, end_user, provider, model, max(model_norm),
        count(*) FILTER (WHERE right(request_id, 5) <> ':late'),
        LEAST(sum(input), 9007199254740991)::bigint, LEAST(sum(output), 9007199254740991)::bigint,
        LEAST(sum(reasoning), 9007199254740991)::bigint, LEAST(sum(cache_read), 9007199254740991)::bigint,
        LEAST(sum(cache_write), 9007199254740991)::bigint, LEAST(sum(cost), 9007199254740991)::bigint,
        count(*) FILTER (WHERE no_price)
    FROM usage GROUP BY 1, key, team, org, end_user, provider, model;

-- pruned_before: the prune horizon (Unix ns; 0: nothing pruned). The
-- events before it are deleted; their rollups remain.
INSERT INTO meta (name, value) VALUES ('pruned_before', 0) ON CONFLICT DO NOTHING;
