-- tokenbudget schema for SQLite. Instants are INTEGER Unix nanoseconds (UTC).
-- The schema version lives in PRAGMA user_version; see the migrations in store/.

-- limits: one budget rule. Its identity is (key, team, org, scope, scope_value,
-- metric, window). At most one of key, team and org is set: whose limit it is.
-- None is a default limit: it applies to every key without an enabled limit of
-- its own of the same scope, value, metric and window, and counts per key.
CREATE TABLE IF NOT EXISTS limits (
    id             TEXT    PRIMARY KEY,
    key            TEXT    NOT NULL,
    team           TEXT    NOT NULL DEFAULT '',
    org            TEXT    NOT NULL DEFAULT '',
    scope          TEXT    NOT NULL CHECK (scope IN ('global', 'provider', 'model', 'user', 'tag')),
    scope_value    TEXT    NOT NULL DEFAULT '',
    metric         TEXT    NOT NULL CHECK (metric IN ('tokens', 'input', 'output', 'requests', 'concurrent', 'usd')),
    max            INTEGER NOT NULL CHECK (max > 0),
    window         TEXT    NOT NULL DEFAULT '',   -- canonical name; '' for concurrent; 'once' starts at created_at
    window_seconds INTEGER NOT NULL DEFAULT 0,    -- fixed length; 0 for calendar windows
    reset_time     INTEGER NOT NULL DEFAULT 0,    -- minutes after midnight (calendar)
    timezone       TEXT    NOT NULL DEFAULT '',   -- IANA zone (calendar)
    enabled        INTEGER NOT NULL DEFAULT 1,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    alerts         TEXT    NOT NULL DEFAULT '',  -- thresholds in percent: "50,80,100"
    UNIQUE (key, team, org, scope, scope_value, metric, window)
);

-- alerts: an outbox of threshold crossings, logged with the usage that
-- crossed them, once per (limit, subject, window, threshold); delivered at
-- least once by whichever deliverer holds its claim.
CREATE TABLE IF NOT EXISTS alerts (
    id            TEXT    PRIMARY KEY,
    limit_id      TEXT    NOT NULL,  -- kept when the limit goes: it is history
    level         TEXT    NOT NULL,
    owner         TEXT    NOT NULL DEFAULT '',
    subject       TEXT    NOT NULL DEFAULT '',
    window_start  INTEGER NOT NULL,
    threshold     INTEGER NOT NULL,
    used          INTEGER NOT NULL,
    max           INTEGER NOT NULL,
    at            INTEGER NOT NULL,
    forecast_used INTEGER NOT NULL DEFAULT -1,  -- -1: none
    exhausts_at   INTEGER NOT NULL DEFAULT 0,   -- 0: not before the reset
    delivered_at  INTEGER NOT NULL DEFAULT 0,
    attempts      INTEGER NOT NULL DEFAULT 0,
    next_attempt  INTEGER NOT NULL DEFAULT 0,
    claim_owner   TEXT    NOT NULL DEFAULT '',
    claim_until   INTEGER NOT NULL DEFAULT 0,
    -- 'threshold', or 'exhausted' (threshold 0): a reservation refused for
    -- want of room, once per (limit, subject, window)
    kind          TEXT    NOT NULL DEFAULT 'threshold',
    metric        TEXT    NOT NULL DEFAULT '',  -- the limit's; '' if unknown
    UNIQUE (limit_id, subject, window_start, threshold)
);
CREATE INDEX IF NOT EXISTS alerts_pending ON alerts (next_attempt, at) WHERE delivered_at = 0;
CREATE INDEX IF NOT EXISTS alerts_at ON alerts (at);

-- raises: temporary (until > 0) or lasting additions to a limit.
CREATE TABLE IF NOT EXISTS raises (
    id         TEXT    PRIMARY KEY,
    limit_id   TEXT    NOT NULL REFERENCES limits (id) ON DELETE CASCADE,
    amount     INTEGER NOT NULL CHECK (amount > 0),
    until      INTEGER NOT NULL DEFAULT 0,  -- 0: it stays
    created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS raises_limit ON raises (limit_id);

-- orgs and teams: the levels above a key. An org exists once a team names it.
CREATE TABLE IF NOT EXISTS orgs (
    name       TEXT    PRIMARY KEY,
    created_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS teams (
    name       TEXT    PRIMARY KEY,
    org        TEXT    NOT NULL DEFAULT '',  -- '' for none
    created_at INTEGER NOT NULL
) WITHOUT ROWID;
-- key_teams: each key's team (any key name, gateway key or not).
CREATE TABLE IF NOT EXISTS key_teams (
    key  TEXT NOT NULL PRIMARY KEY,
    team TEXT NOT NULL REFERENCES teams (name) ON DELETE CASCADE
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS key_teams_team ON key_teams (team);

-- usage: the append-only history every counter can be rebuilt from.
CREATE TABLE IF NOT EXISTS usage (
    key         TEXT    NOT NULL,
    request_id  TEXT    NOT NULL,
    provider    TEXT    NOT NULL DEFAULT '',
    model       TEXT    NOT NULL DEFAULT '',
    input       INTEGER NOT NULL DEFAULT 0,
    output      INTEGER NOT NULL DEFAULT 0,
    reasoning   INTEGER NOT NULL DEFAULT 0,
    cache_read  INTEGER NOT NULL DEFAULT 0,
    cache_write INTEGER NOT NULL DEFAULT 0,
    at          INTEGER NOT NULL,
    model_norm  TEXT    NOT NULL DEFAULT '',  -- the model normalised (budget.NormalizeModel): what limits match
    cost        INTEGER NOT NULL DEFAULT 0,   -- micro-dollars at the price in force at `at`
    unpriced    INTEGER NOT NULL DEFAULT 0,   -- 1: no price matched when it was written (cost 0)
    team        TEXT    NOT NULL DEFAULT '',  -- the team and org it was charged to, at write time
    org         TEXT    NOT NULL DEFAULT '',
    end_user    TEXT    NOT NULL DEFAULT '',  -- the end user of the request, '' when unknown
    no_price    INTEGER NOT NULL DEFAULT 0,   -- 1: no price matched (cost 0 and unknown), usd limit or not
    tags        TEXT    NOT NULL DEFAULT '',  -- the request's tags, normalized: "name=value,..." sorted by name
    PRIMARY KEY (key, request_id)
) WITHOUT ROWID;
-- Covering indexes: seeding a cold window reads only an index, never the table.
CREATE INDEX IF NOT EXISTS usage_window ON usage (key, at, provider, model_norm, end_user, input, output, reasoning, cost);
CREATE INDEX IF NOT EXISTS usage_team ON usage (team, at, provider, model_norm, end_user, input, output, reasoning, cost) WHERE team <> '';
CREATE INDEX IF NOT EXISTS usage_org ON usage (org, at, provider, model_norm, end_user, input, output, reasoning, cost) WHERE org <> '';

-- rollups: the history summed per UTC day and (key, team, org, end_user,
-- provider, model, tags), written in the same transaction as the events; all that
-- remains of days before the prune horizon (meta pruned_before).
CREATE TABLE IF NOT EXISTS rollups (
    day         INTEGER NOT NULL,  -- the UTC midnight starting the day, Unix ns
    key         TEXT    NOT NULL,
    team        TEXT    NOT NULL DEFAULT '',
    org         TEXT    NOT NULL DEFAULT '',
    end_user    TEXT    NOT NULL DEFAULT '',
    provider    TEXT    NOT NULL DEFAULT '',
    model       TEXT    NOT NULL DEFAULT '',  -- as recorded
    tags        TEXT    NOT NULL DEFAULT '',  -- as usage.tags
    model_norm  TEXT    NOT NULL DEFAULT '',  -- normalised: what model limits match
    requests    INTEGER NOT NULL DEFAULT 0,   -- events, late commits' excess not counted
    input       INTEGER NOT NULL DEFAULT 0,
    output      INTEGER NOT NULL DEFAULT 0,
    reasoning   INTEGER NOT NULL DEFAULT 0,
    cache_read  INTEGER NOT NULL DEFAULT 0,
    cache_write INTEGER NOT NULL DEFAULT 0,
    cost        INTEGER NOT NULL DEFAULT 0,   -- micro-dollars
    no_price    INTEGER NOT NULL DEFAULT 0,   -- events no price matched
    PRIMARY KEY (day, key, team, org, end_user, provider, model, tags)
) WITHOUT ROWID;

-- prices: USD per million tokens, in micro-dollars, per (provider, model,
-- tier, above_input, from); model is a normalised name or a pattern, tier ''
-- the standard tier, above_input 0 or the prompt tokens a long-context row
-- applies above. cache_write_1h prices a write to a 1-hour cache
-- (cache_write the 5-minute one).
CREATE TABLE IF NOT EXISTS prices (
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
    cache_write_1h INTEGER NOT NULL,
    PRIMARY KEY (provider, model, tier, above_input, from_at)
) WITHOUT ROWID;

-- counters: a limit's usage in one window for one subject (the key a default
-- limit counts for; '' for a key's own limit); always equal to the history's sum.
CREATE TABLE IF NOT EXISTS counters (
    limit_id     TEXT    NOT NULL REFERENCES limits (id) ON DELETE CASCADE,
    subject      TEXT    NOT NULL DEFAULT '',
    window_start INTEGER NOT NULL,
    window_end   INTEGER NOT NULL,
    used         INTEGER NOT NULL,
    PRIMARY KEY (limit_id, subject, window_start)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS rollovers (
    limit_id          TEXT    NOT NULL REFERENCES limits (id) ON DELETE CASCADE,
    subject           TEXT    NOT NULL DEFAULT '',
    window_start      INTEGER NOT NULL,
    prev_window_start INTEGER NOT NULL,
    prev_used         INTEGER NOT NULL,
    logged_at         INTEGER NOT NULL,
    PRIMARY KEY (limit_id, subject, window_start)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS rollovers_logged ON rollovers (logged_at);

CREATE TABLE IF NOT EXISTS reservations (
    id          TEXT    PRIMARY KEY,  -- time-ordered: new rows go to the end of the index
    key         TEXT    NOT NULL,
    team        TEXT    NOT NULL DEFAULT '',  -- the levels it holds on, charged at commit
    org         TEXT    NOT NULL DEFAULT '',
    end_user    TEXT    NOT NULL DEFAULT '',
    provider    TEXT    NOT NULL DEFAULT '',
    model       TEXT    NOT NULL DEFAULT '',
    est_tokens  INTEGER NOT NULL DEFAULT 0,
    est_input   INTEGER NOT NULL DEFAULT 0,
    est_output  INTEGER NOT NULL DEFAULT 0,
    at          INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('live', 'committed', 'released', 'expired')),
    settled_at  INTEGER NOT NULL DEFAULT 0,
    -- release: holds lapse at expires_at; charge: recovery charges the estimate
    on_expiry   TEXT    NOT NULL DEFAULT 'release' CHECK (on_expiry IN ('release', 'charge')),
    -- a copy of its holds while live, one per line: limit_id, subject,
    -- window_start, amount, and R (expires with the reservation) or N (never):
    -- settling and renewing find the hold rows without an index of their own
    holds       TEXT    NOT NULL DEFAULT '',
    tags        TEXT    NOT NULL DEFAULT ''  -- the request's, charged at commit (as usage.tags)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS reservations_live ON reservations (expires_at) WHERE state = 'live';
CREATE INDEX IF NOT EXISTS reservations_settled ON reservations (settled_at) WHERE state <> 'live';

-- holds: what live reservations hold on each counter window (leases:
-- window_start 0), keyed by the window, as reservations read them.
CREATE TABLE IF NOT EXISTS holds (
    limit_id       TEXT    NOT NULL REFERENCES limits (id) ON DELETE CASCADE,
    subject        TEXT    NOT NULL DEFAULT '',  -- the counter's subject (see counters)
    window_start   INTEGER NOT NULL,
    reservation_id TEXT    NOT NULL,
    amount         INTEGER NOT NULL,
    expires_at     INTEGER NOT NULL,
    PRIMARY KEY (limit_id, subject, window_start, reservation_id)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS providers (
    provider       TEXT    PRIMARY KEY,
    kind           TEXT    NOT NULL CHECK (kind IN ('rate_limited', 'overloaded', 'auth_missing')),
    parked_at      INTEGER NOT NULL,
    retry_after    INTEGER NOT NULL,  -- nanoseconds
    resume_at      INTEGER NOT NULL,
    affected       TEXT    NOT NULL DEFAULT '',  -- newline-separated labels
    probe_failures INTEGER NOT NULL DEFAULT 0,
    probe_owner    TEXT    NOT NULL DEFAULT '',
    probe_until    INTEGER NOT NULL DEFAULT 0
);

-- gateway_keys: proxy credentials; only the SHA-256 of the secret is kept.
CREATE TABLE IF NOT EXISTS gateway_keys (
    name       TEXT    PRIMARY KEY,
    hash       TEXT    NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER NOT NULL DEFAULT 0,
    prev_hash    TEXT    NOT NULL DEFAULT '',  -- the secret a rotation replaced, accepted until prev_until
    prev_until   INTEGER NOT NULL DEFAULT 0,
    last_used_at INTEGER NOT NULL DEFAULT 0,  -- to within a minute
    expires_at   INTEGER NOT NULL DEFAULT 0,  -- 0: never
    models       TEXT    NOT NULL DEFAULT ''  -- newline-separated patterns; '': any model
);

-- admin_tokens: the admin API's credentials, scoped to a team, an org or
-- everything (both ''); only the SHA-256 of the secret is kept.
CREATE TABLE IF NOT EXISTS admin_tokens (
    name       TEXT    PRIMARY KEY,
    hash       TEXT    NOT NULL UNIQUE,
    team       TEXT    NOT NULL DEFAULT '',
    org        TEXT    NOT NULL DEFAULT '',
    read_only  INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER NOT NULL DEFAULT 0
);

-- audit: every change to keys, limits, raises, teams, prices and admin
-- tokens, appended in the change's own transaction; never pruned. before
-- and after are the object's JSON ('' when it did not or no longer
-- exists), never a secret or a hash.
CREATE TABLE IF NOT EXISTS audit (
    seq         INTEGER PRIMARY KEY,  -- the log's order: the order entries were appended
    id          TEXT    NOT NULL UNIQUE,
    at          INTEGER NOT NULL,
    actor_kind  TEXT    NOT NULL,
    actor_name  TEXT    NOT NULL DEFAULT '',
    action      TEXT    NOT NULL,
    object_kind TEXT    NOT NULL,
    object_id   TEXT    NOT NULL,
    team        TEXT    NOT NULL DEFAULT '',
    org         TEXT    NOT NULL DEFAULT '',
    was_team    TEXT    NOT NULL DEFAULT '',  -- where a move took the object from
    was_org     TEXT    NOT NULL DEFAULT '',
    before_json TEXT    NOT NULL DEFAULT '',
    after_json  TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS audit_at ON audit (at);
CREATE INDEX IF NOT EXISTS gateway_keys_prev ON gateway_keys (prev_hash) WHERE prev_hash <> '';

-- meta: limits_version moves on every change to limits, raises, teams, orgs
-- and key placements, so a writer can confirm inside its transaction that the
-- definitions it holds are current.
CREATE TABLE IF NOT EXISTS meta (
    name  TEXT    PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT OR IGNORE INTO meta (name, value) VALUES ('limits_version', 0);
INSERT OR IGNORE INTO meta (name, value) VALUES ('prices_version', 0);
INSERT OR IGNORE INTO meta (name, value) VALUES ('pruned_before', 0);  -- Unix ns; 0: nothing pruned
CREATE TRIGGER IF NOT EXISTS limits_ins AFTER INSERT ON limits
BEGIN UPDATE meta SET value = value + 1 WHERE name = 'limits_version'; END;
CREATE TRIGGER IF NOT EXISTS limits_upd AFTER UPDATE ON limits
BEGIN UPDATE meta SET value = value + 1 WHERE name = 'limits_version'; END;
CREATE TRIGGER IF NOT EXISTS limits_del AFTER DELETE ON limits
BEGIN UPDATE meta SET value = value + 1 WHERE name = 'limits_version'; END;
CREATE TRIGGER IF NOT EXISTS raises_ins AFTER INSERT ON raises
BEGIN UPDATE meta SET value = value + 1 WHERE name = 'limits_version'; END;
CREATE TRIGGER IF NOT EXISTS raises_del AFTER DELETE ON raises
BEGIN UPDATE meta SET value = value + 1 WHERE name = 'limits_version'; END;
CREATE TRIGGER IF NOT EXISTS teams_ins AFTER INSERT ON teams
BEGIN UPDATE meta SET value = value + 1 WHERE name = 'limits_version'; END;
CREATE TRIGGER IF NOT EXISTS teams_upd AFTER UPDATE ON teams
BEGIN UPDATE meta SET value = value + 1 WHERE name = 'limits_version'; END;
CREATE TRIGGER IF NOT EXISTS teams_del AFTER DELETE ON teams
BEGIN UPDATE meta SET value = value + 1 WHERE name = 'limits_version'; END;
CREATE TRIGGER IF NOT EXISTS key_teams_ins AFTER INSERT ON key_teams
BEGIN UPDATE meta SET value = value + 1 WHERE name = 'limits_version'; END;
CREATE TRIGGER IF NOT EXISTS key_teams_upd AFTER UPDATE ON key_teams
BEGIN UPDATE meta SET value = value + 1 WHERE name = 'limits_version'; END;
CREATE TRIGGER IF NOT EXISTS key_teams_del AFTER DELETE ON key_teams
BEGIN UPDATE meta SET value = value + 1 WHERE name = 'limits_version'; END;
