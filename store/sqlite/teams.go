package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

func (t *tx) Placement(ctx context.Context, key string) (string, string, error) {
	var p struct {
		Team string `db:"team"`
		Org  string `db:"org"`
	}
	err := t.get(ctx, &p, `SELECT k.team, COALESCE(tm.org, '') AS org FROM key_teams k LEFT JOIN teams tm ON tm.name = k.team WHERE k.key = ?`, key)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("read placement of key %s: %w", key, err)
	}
	return p.Team, p.Org, nil
}

func (t *tx) Teams(ctx context.Context) ([]budget.Team, error) {
	var rows []sqlrow.Team
	if err := t.sel(ctx, &rows, `SELECT tm.name, tm.org, COALESCE((SELECT group_concat(k.key, char(10)) FROM key_teams k WHERE k.team = tm.name), '') AS keys
		FROM teams tm ORDER BY tm.name`); err != nil {
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
	if err := t.sel(ctx, &out, `SELECT name FROM orgs ORDER BY name`); err != nil {
		return nil, fmt.Errorf("read orgs: %w", err)
	}
	return out, nil
}

func (t *tx) PutTeam(ctx context.Context, tm budget.Team) error {
	now := ns(time.Now())
	if tm.Org != "" {
		if _, err := t.exec(ctx, `INSERT INTO orgs (name, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING`, tm.Org, now); err != nil {
			return fmt.Errorf("create org %s: %w", tm.Org, err)
		}
	}
	if _, err := t.exec(ctx, `INSERT INTO teams (name, org, created_at) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET org = excluded.org WHERE org <> excluded.org`, tm.Name, tm.Org, now); err != nil {
		return fmt.Errorf("put team %s: %w", tm.Name, err)
	}
	return nil
}

func (t *tx) DeleteTeam(ctx context.Context, name string) error {
	n, err := t.exec(ctx, `DELETE FROM teams WHERE name = ?`, name)
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
		_, err = t.exec(ctx, `DELETE FROM key_teams WHERE key = ?`, key)
	} else {
		_, err = t.exec(ctx, `INSERT INTO key_teams (key, team) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET team = excluded.team WHERE team <> excluded.team`, key, team)
	}
	if err != nil {
		return fmt.Errorf("set team of key %s: %w", key, err)
	}
	return nil
}

func (t *tx) AddRaise(ctx context.Context, limitID string, r budget.Raise) error {
	if _, err := t.exec(ctx, `INSERT INTO raises (`+sqlrow.RaiseCols+`) VALUES (?, ?, ?, ?, ?)`, sqlrow.RaiseArgs(limitID, r)...); err != nil {
		return fmt.Errorf("raise limit %s: %w", limitID, err)
	}
	return nil
}

// LockDefinitions does nothing but require a write transaction: BEGIN
// IMMEDIATE already serialises them.
func (t *tx) LockDefinitions(context.Context) error { return t.write() }
