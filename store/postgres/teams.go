package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// Teams, organisations, key placements and raises. Every statement that
// changes them fires tokenbudget_limits_changed (migration 8), which takes
// the limits lock exclusively and moves limits_version, as a change to
// limits does: a writer that resolved a key's placement and limits under
// the shared lock (LimitsVersion) keeps them until it ends.

func (t *tx) Placement(ctx context.Context, key string) (string, string, error) {
	var team, org string
	err := t.tx.QueryRowContext(ctx, `SELECT k.team, COALESCE(tm.org, '') FROM key_teams k
		LEFT JOIN teams tm ON tm.name = k.team WHERE k.key = $1`, key).Scan(&team, &org)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("read placement of key %s: %w", key, err)
	}
	return team, org, nil
}

func (t *tx) Teams(ctx context.Context) ([]budget.Team, error) {
	var rows []sqlrow.Team
	if err := t.tx.SelectContext(ctx, &rows, `SELECT tm.name, tm.org,
		COALESCE((SELECT string_agg(k.key, E'\n' ORDER BY k.key COLLATE "C") FROM key_teams k WHERE k.team = tm.name), '') AS keys
		FROM teams tm ORDER BY tm.name COLLATE "C"`); err != nil {
		return nil, fmt.Errorf("read teams: %w", err)
	}
	out := make([]budget.Team, len(rows))
	for i := range rows {
		out[i] = rows[i].Decode()
	}
	return out, nil
}

func (t *tx) Orgs(ctx context.Context) ([]string, error) {
	var out []string
	if err := t.tx.SelectContext(ctx, &out, `SELECT name FROM orgs ORDER BY name COLLATE "C"`); err != nil {
		return nil, fmt.Errorf("read orgs: %w", err)
	}
	return out, nil
}

func (t *tx) PutTeam(ctx context.Context, tm budget.Team) error {
	now := ns(time.Now())
	if tm.Org != "" {
		if _, err := t.exec(ctx, `INSERT INTO orgs (name, created_at) VALUES ($1, $2) ON CONFLICT DO NOTHING`, tm.Org, now); err != nil {
			return fmt.Errorf("create org %s: %w", tm.Org, err)
		}
	}
	if _, err := t.exec(ctx, `INSERT INTO teams (name, org, created_at) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET org = excluded.org WHERE teams.org <> excluded.org`, tm.Name, tm.Org, now); err != nil {
		return fmt.Errorf("put team %s: %w", tm.Name, err)
	}
	return nil
}

func (t *tx) DeleteTeam(ctx context.Context, name string) error {
	n, err := t.exec(ctx, `DELETE FROM teams WHERE name = $1`, name)
	if err != nil {
		return fmt.Errorf("delete team %s: %w", name, err)
	}
	if n == 0 {
		return fmt.Errorf("team %q: %w", name, budget.ErrNotFound)
	}
	return nil
}

func (t *tx) SetKeyTeam(ctx context.Context, key, team string) error {
	var err error
	if team == "" {
		_, err = t.exec(ctx, `DELETE FROM key_teams WHERE key = $1`, key)
	} else {
		_, err = t.exec(ctx, `INSERT INTO key_teams (key, team) VALUES ($1, $2)
			ON CONFLICT (key) DO UPDATE SET team = excluded.team WHERE key_teams.team <> excluded.team`, key, team)
	}
	if err != nil {
		return fmt.Errorf("set team of key %s: %w", key, err)
	}
	return nil
}

func (t *tx) AddRaise(ctx context.Context, limitID string, r budget.Raise) error {
	if _, err := t.exec(ctx, `INSERT INTO raises (`+sqlrow.RaiseCols+`) VALUES ($1, $2, $3, $4, $5)`, sqlrow.RaiseArgs(limitID, r)...); err != nil {
		return fmt.Errorf("raise limit %s: %w", limitID, err)
	}
	return nil
}

// LockDefinitions takes the limits lock exclusively until the transaction
// ends: the lock tokenbudget_limits_changed takes before any change to
// limits, raises, teams, orgs and key placements, and writers hold shared
// from reading the limits version. An admin write takes it first, so what
// it checks before writing (no org has the team's name, say) holds until
// it commits, and two admins are serialised.
func (t *tx) LockDefinitions(ctx context.Context) error {
	if err := t.write(); err != nil {
		return err
	}
	if _, err := t.tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1::integer, $2::integer)`, lockClass, t.db.lockKey); err != nil {
		return fmt.Errorf("lock the limit definitions: %w", err)
	}
	return nil
}
