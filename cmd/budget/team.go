package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/jsonview"
)

// Teams and organisations, the levels above a key: team set, ls and rm,
// and key set-team, which places a key in a team.

const teamHelp = `usage: budget team <set|ls|rm> [flags]

	team set TEAM [--org ORG]  create a team, or move it to another org (or none)
	team ls                    list teams with their org and keys
	team rm TEAM               remove a team (exit 4 when unknown, 2 while it has limits)

A key belongs to at most one team ('budget key add NAME --team TEAM',
'budget key set-team NAME TEAM'), a team to at most one org. A request is
checked against its key's, its team's and its org's limits together
('budget limit set --team T' or '--org O').
`

func (m *Main) runTeam(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(m.Stderr, teamHelp)
		return usagef("team", "missing subcommand: set, ls or rm")
	}
	switch args[0] {
	case "set":
		return m.runTeamSet(ctx, args[1:])
	case "ls", "list":
		return m.runTeamLs(ctx, args[1:])
	case "rm", "remove":
		return m.runTeamRm(ctx, args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Fprint(m.Stdout, teamHelp)
		return nil
	}
	return usagef("team", "unknown subcommand %q: want set, ls or rm", args[0])
}

// teamName reads the one TEAM argument of cmd and validates it.
func teamName(cmd string, pos []string) (string, error) {
	switch len(pos) {
	case 0:
		return "", usagef(cmd, "missing team name")
	case 1:
	default:
		return "", usagef(cmd, "unexpected argument %q", pos[1])
	}
	name := strings.TrimSpace(pos[0])
	if name == "" {
		return "", budget.Invalid("team", pos[0], "must not be empty")
	}
	return name, budget.CheckLabel("team", name)
}

const teamSetHelp = `usage: budget team set TEAM [--org ORG] [--json]

Creates the team TEAM in the organisation ORG (none without --org), or
moves an existing team to ORG (out of any without --org). An org exists
once a team names it. A team and an org may not share a name (exit 2).
Moving a team moves only what its keys spend from then on: what was
charged stays where it was charged. Creates the database if it is missing.
Prints the team's name, or with --json the team: {"name", "org", "keys"}.

`

func (m *Main) runTeamSet(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("team set")
	dsn := m.dbFlag(fs)
	org := fs.String("org", "", "the organisation the team belongs to (default none)")
	asJSON := fs.Bool("json", false, `print {"name", "org", "keys"}`)
	pos, err := m.parseArgs(fs, teamSetHelp, args)
	if err != nil {
		return err
	}
	name, err := teamName("team set", pos)
	if err != nil {
		return err
	}
	*org = strings.TrimSpace(*org)
	if err := budget.CheckLabel("org", *org); err != nil {
		return err
	}
	if *org == name {
		return budget.Invalid("org", *org, "is the name of the team; a team and an org may not share a name")
	}

	db, err := m.openDB(ctx, *dsn, dbOptions{create: true})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	if _, err := db.SetTeam(ctx, name, *org); err != nil {
		return err
	}
	if !*asJSON {
		_, err = fmt.Fprintln(m.Stdout, name)
		return err
	}
	ts, err := db.Teams(ctx)
	if err != nil {
		return err
	}
	t := budget.Team{Name: name, Org: *org}
	if i := slices.IndexFunc(ts, func(t budget.Team) bool { return t.Name == name }); i >= 0 {
		t = ts[i]
	}
	return writeJSON(m.Stdout, jsonview.TeamOf(&t))
}

const teamLsHelp = `usage: budget team ls [--json]

Lists the teams by name, each with its org and its keys. With --json prints
{"teams": [{"name", "org", "keys"}]} (org null when none, keys [] when none).

`

func (m *Main) runTeamLs(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("team ls")
	dsn := m.dbFlag(fs)
	asJSON := fs.Bool("json", false, `print {"teams": [...]}`)
	pos, err := m.parseArgs(fs, teamLsHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("team ls", pos); err != nil {
		return err
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	ts, err := db.Teams(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		out := make([]jsonview.Team, len(ts))
		for i := range ts {
			out[i] = jsonview.TeamOf(&ts[i])
		}
		return writeJSON(m.Stdout, struct {
			Teams []jsonview.Team `json:"teams"`
		}{out})
	}
	if len(ts) == 0 {
		_, err = fmt.Fprintln(m.Stdout, "no teams")
		return err
	}
	w := newTable(m.Stdout)
	fmt.Fprintln(w, "TEAM\tORG\tKEYS")
	for _, t := range ts {
		org, keys := t.Org, strings.Join(t.Keys, ", ")
		if org == "" {
			org = "-"
		}
		if keys == "" {
			keys = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", t.Name, org, keys)
	}
	return w.Flush()
}

const teamRmHelp = `usage: budget team rm [--db PATH] TEAM

Removes a team; its keys are left in no team, and what they spent stays
charged to it in the history. A team that still has limits is refused
(exit 2, naming them: 'budget limit rm' them first). Exit 4 when no team
has that name.

`

func (m *Main) runTeamRm(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("team rm")
	dsn := m.dbFlag(fs)
	pos, err := m.parseArgs(fs, teamRmHelp, args)
	if err != nil {
		return err
	}
	name, err := teamName("team rm", pos)
	if err != nil {
		return err
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	return db.DeleteTeam(ctx, name)
}

const keySetTeamHelp = `usage: budget key set-team NAME (TEAM | --none)

Places the key NAME in the team TEAM, or with --none in no team. Any key
name will do: a library's keys need not be gateway keys. From then on the
key's requests are checked against the team's and its org's limits too,
and its usage is charged to them; what it spent before stays charged where
it was. An unknown team is invalid (exit 2). Creates the database if it is
missing (not for an unknown team).

`

func (m *Main) runKeySetTeam(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("key set-team")
	dsn := m.dbFlag(fs)
	none := fs.Bool("none", false, "take the key out of any team")
	pos, err := m.parseArgs(fs, keySetTeamHelp, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		return usagef("key set-team", "missing key name")
	case *none && len(pos) > 1:
		return usagef("key set-team", "unexpected argument %q: --none takes no team", pos[1])
	case !*none && len(pos) == 1:
		return usagef("key set-team", "missing team name (or --none)")
	case len(pos) > 2:
		return usagef("key set-team", "unexpected argument %q", pos[2])
	}
	key := strings.TrimSpace(pos[0])
	if key == "" {
		return budget.Invalid("key", pos[0], "must not be empty")
	}
	if err := budget.CheckLabel("key", key); err != nil {
		return err
	}
	team := ""
	if !*none {
		if team = strings.TrimSpace(pos[1]); team == "" {
			return budget.Invalid("team", pos[1], "must not be empty (--none takes the key out of any team)")
		}
		if err := budget.CheckLabel("team", team); err != nil {
			return err
		}
	}
	if err := noTeamsYet(*dsn, team, ""); err != nil {
		return err
	}

	db, err := m.openDB(ctx, *dsn, dbOptions{create: true})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	return db.SetKeyTeam(ctx, key, team)
}
