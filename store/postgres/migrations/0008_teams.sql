-- Teams, organisations, end users, raises and once windows.

-- A limit belongs to a key, a team or an organisation (at most one is set;
-- none makes a default limit), and that owner is part of its identity. A
-- scope 'user' limits one end user, or each ('*'); a window 'once' never
-- resets and starts at created_at.
ALTER TABLE limits ADD COLUMN IF NOT EXISTS team TEXT NOT NULL DEFAULT '';
ALTER TABLE limits ADD COLUMN IF NOT EXISTS org TEXT NOT NULL DEFAULT '';
-- The constraints' names are those migration 1 gave them; a missing one
-- fails the migration rather than leaving the old identity in place.
ALTER TABLE limits DROP CONSTRAINT limits_key_scope_scope_value_metric_window_key;
ALTER TABLE limits ADD CONSTRAINT limits_identity UNIQUE (key, team, org, scope, scope_value, metric, "window");
ALTER TABLE limits DROP CONSTRAINT limits_scope_check;
ALTER TABLE limits ADD CONSTRAINT limits_scope_check CHECK (scope IN ('global', 'provider', 'model', 'user'));

-- raises: temporary (until > 0) or lasting additions to a limit.
CREATE TABLE raises (
    id         TEXT   PRIMARY KEY,
    limit_id   TEXT   NOT NULL REFERENCES limits (id) ON DELETE CASCADE,
    amount     BIGINT NOT NULL CHECK (amount > 0),
    until      BIGINT NOT NULL DEFAULT 0,  -- 0: it stays
    created_at BIGINT NOT NULL
);
CREATE INDEX raises_limit ON raises (limit_id);

-- orgs and teams: the levels above a key. An org exists once a team names it.
CREATE TABLE orgs (
    name       TEXT   PRIMARY KEY,
    created_at BIGINT NOT NULL
);
CREATE TABLE teams (
    name       TEXT   PRIMARY KEY,
    org        TEXT   NOT NULL DEFAULT '',  -- '' for none
    created_at BIGINT NOT NULL
);
-- key_teams: each key's team (any key name, gateway key or not).
CREATE TABLE key_teams (
    key  TEXT NOT NULL PRIMARY KEY,
    team TEXT NOT NULL REFERENCES teams (name) ON DELETE CASCADE
);
CREATE INDEX key_teams_team ON key_teams (team);

-- Events keep the team and org they were charged to at write time, and
-- their end user ('' when unknown). Covering indexes: seeding a key's,
-- a team's or an org's cold window can be an index-only scan, whatever
-- the metric (request_id for requests: a :late event counts none).
ALTER TABLE usage ADD COLUMN IF NOT EXISTS team TEXT NOT NULL DEFAULT '';
ALTER TABLE usage ADD COLUMN IF NOT EXISTS org TEXT NOT NULL DEFAULT '';
ALTER TABLE usage ADD COLUMN IF NOT EXISTS end_user TEXT NOT NULL DEFAULT '';
DROP INDEX IF EXISTS usage_window;
CREATE INDEX usage_window ON usage (key, at)
    INCLUDE (provider, model_norm, end_user, input, output, reasoning, cost, request_id);
CREATE INDEX usage_team ON usage (team, at)
    INCLUDE (provider, model_norm, end_user, input, output, reasoning, cost, request_id) WHERE team <> '';
CREATE INDEX usage_org ON usage (org, at)
    INCLUDE (provider, model_norm, end_user, input, output, reasoning, cost, request_id) WHERE org <> '';

-- Reservations keep the levels they hold on, charged at commit.
ALTER TABLE reservations ADD COLUMN IF NOT EXISTS team TEXT NOT NULL DEFAULT '';
ALTER TABLE reservations ADD COLUMN IF NOT EXISTS org TEXT NOT NULL DEFAULT '';
ALTER TABLE reservations ADD COLUMN IF NOT EXISTS end_user TEXT NOT NULL DEFAULT '';

-- limits_version now moves on every change to limits, raises, teams, orgs
-- and key placements, each of which takes the limits lock exclusively
-- first (tokenbudget_limits_changed, migration 1): a writer that resolved
-- a key's placement and limits under the shared lock stays right.
CREATE TRIGGER limits_version BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON raises
    FOR EACH STATEMENT EXECUTE FUNCTION tokenbudget_limits_changed();
CREATE TRIGGER limits_version BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON orgs
    FOR EACH STATEMENT EXECUTE FUNCTION tokenbudget_limits_changed();
CREATE TRIGGER limits_version BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON teams
    FOR EACH STATEMENT EXECUTE FUNCTION tokenbudget_limits_changed();
CREATE TRIGGER limits_version BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON key_teams
    FOR EACH STATEMENT EXECUTE FUNCTION tokenbudget_limits_changed();
