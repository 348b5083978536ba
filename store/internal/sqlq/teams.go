package sqlq

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// Teams, organisations, key placements and raises.

var (
	qPlacement = New(`SELECT k.team, COALESCE(tm.org, '') AS org FROM key_teams k LEFT JOIN teams tm ON tm.name = k.team WHERE k.key = ?`)
	qTeams     = Each(
		`SELECT tm.name, tm.org, COALESCE((SELECT group_concat(k.key, char(10)) FROM key_teams k WHERE k.team = tm.name), '') AS keys
		FROM teams tm ORDER BY tm.name`,
		`SELECT tm.name, tm.org,
		COALESCE((SELECT string_agg(k.key, E'\n' ORDER BY k.key COLLATE "C") FROM key_teams k WHERE k.team = tm.name), '') AS keys
		FROM teams tm ORDER BY tm.name COLLATE "C"`)
	qOrgs       = New(`SELECT name FROM orgs ORDER BY name COLLATE "C"`)
	qPutOrg     = New(`INSERT INTO orgs (name, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING`)
	qPutTeam    = New(`INSERT INTO teams (name, org, created_at) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE SET org = excluded.org WHERE teams.org <> excluded.org`)
	qDeleteTeam = New(`DELETE FROM teams WHERE name = ?`)
	qUnsetTeam  = New(`DELETE FROM key_teams WHERE key = ?`)
	qSetTeam    = New(`INSERT INTO key_teams (key, team) VALUES (?, ?)
		ON CONFLICT (key) DO UPDATE SET team = excluded.team WHERE key_teams.team <> excluded.team`)
	qAddRaise = New(`INSERT INTO raises (` + sqlrow.RaiseCols + `) VALUES (?, ?, ?, ?, ?)`)
)

func (t Tx) Placement(ctx context.Context, key string) (string, string, error) {
	var p struct {
		Team string `db:"team"`
		Org  string `db:"org"`
	}
	err := t.get(ctx, &p, &qPlacement, key)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("read placement of key %s: %w", key, err)
	}
	return p.Team, p.Org, nil
}

func (t Tx) Teams(ctx context.Context) ([]budget.Team, error) {
	var rows []sqlrow.Team
	if err := t.sel(ctx, &rows, &qTeams); err != nil {
		return nil, fmt.Errorf("read teams: %w", err)
	}
	out := make([]budget.Team, len(rows))
	for i := range rows {
		out[i] = rows[i].Decode()
	}
	return out, nil
}

func (t Tx) Orgs(ctx context.Context) ([]string, error) {
	var out []string
	if err := t.sel(ctx, &out, &qOrgs); err != nil {
		return nil, fmt.Errorf("read orgs: %w", err)
	}
	return out, nil
}

func (t Tx) PutTeam(ctx context.Context, tm budget.Team) error {
	now := sqlrow.Ns(time.Now())
	if tm.Org != "" {
		if _, err := t.exec(ctx, &qPutOrg, tm.Org, now); err != nil {
			return fmt.Errorf("create org %s: %w", tm.Org, err)
		}
	}
	if _, err := t.exec(ctx, &qPutTeam, tm.Name, tm.Org, now); err != nil {
		return fmt.Errorf("put team %s: %w", tm.Name, err)
	}
	return nil
}

func (t Tx) DeleteTeam(ctx context.Context, name string) error {
	n, err := t.exec(ctx, &qDeleteTeam, name)
	if err != nil {
		return fmt.Errorf("delete team %s: %w", name, err)
	}
	if n == 0 {
		return fmt.Errorf("team %q: %w", name, budget.ErrNotFound)
	}
	return nil
}

func (t Tx) SetKeyTeam(ctx context.Context, key, team string) error {
	var err error
	if team == "" {
		_, err = t.exec(ctx, &qUnsetTeam, key)
	} else {
		_, err = t.exec(ctx, &qSetTeam, key, team)
	}
	if err != nil {
		return fmt.Errorf("set team of key %s: %w", key, err)
	}
	return nil
}

func (t Tx) AddRaise(ctx context.Context, limitID string, r budget.Raise) error {
	if _, err := t.exec(ctx, &qAddRaise, sqlrow.RaiseArgs(limitID, r)...); err != nil {
		return fmt.Errorf("raise limit %s: %w", limitID, err)
	}
	return nil
}
