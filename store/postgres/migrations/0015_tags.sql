-- Budgets by tag: events, rollups and reservations carry the request's
-- tags (normalized, "name=value,..." sorted by name; '' for none), the
-- rollups' identity gains them, and a limit may have scope 'tag'.
ALTER TABLE usage ADD COLUMN IF NOT EXISTS tags TEXT NOT NULL DEFAULT '';
ALTER TABLE reservations ADD COLUMN IF NOT EXISTS tags TEXT NOT NULL DEFAULT '';
ALTER TABLE rollups ADD COLUMN IF NOT EXISTS tags TEXT NOT NULL DEFAULT '';
ALTER TABLE rollups DROP CONSTRAINT rollups_pkey;
ALTER TABLE rollups ADD PRIMARY KEY (day, key, team, org, end_user, provider, model, tags);
ALTER TABLE limits DROP CONSTRAINT limits_scope_check;
ALTER TABLE limits ADD CONSTRAINT limits_scope_check CHECK (scope IN ('global', 'provider', 'model', 'user', 'tag'));
