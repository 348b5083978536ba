package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
	"github.com/tokenbudget/tokenbudget/jsonview"
)

const adminTokenHelp = `usage: budget admin token <add|ls|revoke> [flags]

	admin token add NAME     create an admin API token; prints its secret, shown only this once
	                         (--team T or --org O: scoped to it; --read-only: GETs only)
	admin token ls           list admin tokens: scope and state
	admin token revoke NAME  revoke an admin token
`

func (m *Main) runAdmin(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "token" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help") {
			fmt.Fprint(m.Stdout, adminTokenHelp)
			return nil
		}
		fmt.Fprint(m.Stderr, adminTokenHelp)
		if len(args) == 0 {
			return usagef("admin", "missing subcommand: token")
		}
		return usagef("admin", "unknown subcommand %q: want token", args[0])
	}
	args = args[1:]
	if len(args) == 0 {
		fmt.Fprint(m.Stderr, adminTokenHelp)
		return usagef("admin token", "missing subcommand: add, ls or revoke")
	}
	switch args[0] {
	case "add":
		return m.runAdminTokenAdd(ctx, args[1:])
	case "ls", "list":
		return m.runAdminTokenLs(ctx, args[1:])
	case "revoke":
		return m.runAdminTokenRevoke(ctx, args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Fprint(m.Stdout, adminTokenHelp)
		return nil
	}
	return usagef("admin token", "unknown subcommand %q: want add, ls or revoke", args[0])
}

const adminTokenAddHelp = `usage: budget admin token add NAME [--team T | --org O] [--read-only] [--at T] [--json]

Creates the admin token NAME for the admin API ('budget proxy
--admin-listen') and prints its secret on stdout: send it as
"Authorization: Bearer SECRET". Only the SHA-256 of the secret is stored: it
is shown here once and never again. A token with --team T sees and changes
only team T's keys, the limits of those keys and the team's own limits;
with --org O the same for every team of org O and the org's own limits;
with neither, everything. --read-only allows only reads. The team or org
must exist (exit 2 otherwise). NAME is 1 to 64 letters, digits, '.', '_'
or '-': the audit log names the token's changes by it. With --json prints
{"name", "secret"}.

`

func (m *Main) runAdminTokenAdd(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("admin token add")
	dsn := m.dbFlag(fs)
	at := m.atFlag(fs)
	team := fs.String("team", "", "scope the token to this team's keys and limits")
	org := fs.String("org", "", "scope the token to this org's teams, keys and limits")
	readOnly := fs.Bool("read-only", false, "the token may only read")
	asJSON := fs.Bool("json", false, `print {"name", "secret"}`)
	pos, err := m.parseArgs(fs, adminTokenAddHelp, args)
	if err != nil {
		return err
	}
	name, err := adminName("admin token add", pos)
	if err != nil {
		return err
	}
	scope := budget.AdminScope{Team: strings.TrimSpace(*team), Org: strings.TrimSpace(*org), ReadOnly: *readOnly}
	if err := scope.Validate(); err != nil {
		return err
	}
	now, err := at()
	if err != nil {
		return err
	}
	if err := noTeamsYet(*dsn, scope.Team, scope.Org); err != nil {
		return err
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{create: true})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	if err := scopeExists(ctx, db.Teams, scope); err != nil {
		return err
	}
	secret, err := gatekey.AddAdminToken(ctx, db.AdminTokens(), name, scope, now)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(m.Stdout, struct {
			Name   string `json:"name"`
			Secret string `json:"secret"`
		}{name, secret})
	}
	fmt.Fprintf(m.Stderr, "admin token %s created (%s); store its secret now, it is not shown again:\n", name, scope)
	_, err = fmt.Fprintln(m.Stdout, secret)
	return err
}

// scopeExists refuses a scope whose team or org does not exist.
func scopeExists(ctx context.Context, teams func(context.Context) ([]budget.Team, error), s budget.AdminScope) error {
	if s.Global() {
		return nil
	}
	ts, err := teams(ctx)
	if err != nil {
		return err
	}
	if s.Team != "" && !slices.ContainsFunc(ts, func(t budget.Team) bool { return t.Name == s.Team }) {
		return budget.Invalid("team", s.Team, "unknown team (create it with: budget team set "+s.Team+")")
	}
	if s.Org != "" && !slices.ContainsFunc(ts, func(t budget.Team) bool { return t.Org == s.Org }) {
		return budget.Invalid("org", s.Org, "unknown org (an org exists once a team names it: budget team set TEAM --org "+s.Org+")")
	}
	return nil
}

// adminName reads the one NAME argument and validates it.
func adminName(cmd string, pos []string) (string, error) {
	switch len(pos) {
	case 0:
		return "", usagef(cmd, "missing token name")
	case 1:
	default:
		return "", usagef(cmd, "unexpected argument %q", pos[1])
	}
	name := strings.TrimSpace(pos[0])
	return name, gatekey.ValidAdminName(name)
}

const adminTokenLsHelp = `usage: budget admin token ls [--json]

Lists the admin tokens by name: scope (global, team T or org O, and
whether read-only), when each was created, and whether it is revoked.
Secrets are never shown. With --json prints {"tokens": [{"name", "team",
"org", "read_only", "created_at", "revoked_at"}]} (team, org and revoked_at
null when they do not apply).

`

func (m *Main) runAdminTokenLs(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("admin token ls")
	dsn := m.dbFlag(fs)
	asJSON := fs.Bool("json", false, `print {"tokens": [...]}`)
	pos, err := m.parseArgs(fs, adminTokenLsHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("admin token ls", pos); err != nil {
		return err
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	toks, err := db.AdminTokens().ListAdminTokens(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		out := make([]jsonview.AdminToken, len(toks))
		for i := range toks {
			out[i] = jsonview.AdminTokenOf(&toks[i])
		}
		return writeJSON(m.Stdout, struct {
			Tokens []jsonview.AdminToken `json:"tokens"`
		}{out})
	}
	if len(toks) == 0 {
		_, err = fmt.Fprintln(m.Stdout, "no admin tokens")
		return err
	}
	w := newTable(m.Stdout)
	fmt.Fprintln(w, "NAME\tSCOPE\tCREATED AT\tREVOKED AT")
	for i := range toks {
		t := &toks[i]
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", t.Name, t.Scope, ts(t.CreatedAt), tsText(t.RevokedAt))
	}
	return w.Flush()
}

const adminTokenRevokeHelp = `usage: budget admin token revoke NAME [--at T]

Revokes the admin token NAME: the admin API refuses it (401) from then on.
Revoking a revoked token is no error (exit 0); an unknown name exits 4.

`

func (m *Main) runAdminTokenRevoke(ctx context.Context, args []string) error {
	return m.runRevoke(ctx, args, "admin token revoke", adminTokenRevokeHelp, adminName,
		func(ctx context.Context, db *tokenbudget.DB, name string, at time.Time) (bool, error) {
			return db.AdminTokens().RevokeAdminToken(ctx, name, at)
		})
}
