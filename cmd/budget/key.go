package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
	"github.com/tokenbudget/tokenbudget/jsonview"
	"github.com/tokenbudget/tokenbudget/proxy"
)

const keyHelp = `usage: budget key <add|ls|rotate|revoke|set-team> [flags]

	key add NAME           create a gateway key; prints its secret, shown only this once
	                       (--reuse: take the name of a revoked key again; --team T: in team T)
	key ls                 list gateway keys: state and last use
	key rotate NAME        give a key a new secret; the old one works for --grace (1h)
	key revoke NAME        revoke a key (the proxy refuses it within 5s)
	key set-team NAME T    place any key (gateway or not) in team T, or in none with --none
	key set NAME           change a key's expiry (--expires) or allowed models (--models)
`

func (m *Main) runKey(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(m.Stderr, keyHelp)
		return usagef("key", "missing subcommand: add, ls, rotate, revoke, set or set-team")
	}
	switch args[0] {
	case "add":
		return m.runKeyAdd(ctx, args[1:])
	case "ls", "list":
		return m.runKeyLs(ctx, args[1:])
	case "revoke":
		return m.runKeyRevoke(ctx, args[1:])
	case "rotate":
		return m.runKeyRotate(ctx, args[1:])
	case "set-team":
		return m.runKeySetTeam(ctx, args[1:])
	case "set":
		return m.runKeySet(ctx, args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Fprint(m.Stdout, keyHelp)
		return nil
	}
	return usagef("key", "unknown subcommand %q: want add, ls, rotate, revoke, set or set-team", args[0])
}

const keyAddHelp = `usage: budget key add NAME [--team TEAM] [--expires T] [--models PATTERN,...] [--reuse] [--at T] [--json]

Creates the gateway key NAME for 'budget proxy' and prints its secret: give
it to the application, which sends it as "Authorization: Bearer SECRET" or
"x-api-key: SECRET". Only the SHA-256 of the secret is stored: it is shown
here once and never again. Limits set for --key NAME apply to its requests.
A name that exists is invalid (exit 2), revoked or not, unless --reuse is
given and the key of that name is revoked: the name then gets a new secret
and keeps its limits and their windows (the revoked secret stays refused).
A live key's name is never taken: 'budget key rotate' gives it a new
secret. --team places the key in TEAM, which must exist ('budget team
set'): an unknown team is invalid (exit 2) and no key is created.
--expires T (RFC3339, after --at) makes the key stop working at T: the
proxy then answers 401 key_expired. --models limits the models the key may
ask for to those matching one of the patterns (model names, or patterns
with * and ?, matched as model-scope limits match: gpt-4o* also matches
openai/GPT-4o-mini); the proxy answers any other model 403
model_not_allowed before it calls the upstream. With --json prints
{"name", "secret"}.

`

func (m *Main) runKeyAdd(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("key add")
	dsn := m.dbFlag(fs)
	at := m.atFlag(fs)
	asJSON := fs.Bool("json", false, `print {"name", "secret"}`)
	reuse := fs.Bool("reuse", false, "take the name of a revoked key again")
	team := fs.String("team", "", "the team the key belongs to (it exists)")
	expires := fs.String("expires", "", "when the key stops working, RFC3339 (default never)")
	models := fs.String("models", "", "the models the key may ask for: names or patterns, comma-separated (default any)")
	pos, err := m.parseArgs(fs, keyAddHelp, args)
	if err != nil {
		return err
	}
	name, err := keyName("key add", pos)
	if err != nil {
		return err
	}
	now, err := at()
	if err != nil {
		return err
	}
	*team = strings.TrimSpace(*team)
	if err := budget.CheckLabel("team", *team); err != nil {
		return err
	}
	rules, err := keyRules(*expires, *models, now)
	if err != nil {
		return err
	}
	if err := noTeamsYet(*dsn, *team, ""); err != nil {
		return err
	}

	db, err := m.openDB(ctx, *dsn, dbOptions{create: true})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	// The team must exist before the key is created, so an unknown team
	// leaves nothing half-written.
	var placed budget.Team
	if *team != "" {
		ts, err := db.Teams(ctx)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(ts, func(t budget.Team) bool { return t.Name == *team })
		if i < 0 {
			return budget.Invalid("team", *team, "unknown team (create it with: budget team set "+*team+")")
		}
		placed = ts[i]
	}
	secret, err := proxy.NewKeySecret()
	if err != nil {
		return err
	}
	rules.Name, rules.Hash, rules.CreatedAt = name, proxy.HashKey(secret), now.UTC()
	// A key for a team is created and placed in one transaction.
	if placed.Name != "" {
		err = db.PlaceNewKey(ctx, name, placed.Name, gatekey.CreateIn(rules, *reuse))
	} else {
		err = gatekey.Create(ctx, db.KeyStore(), rules, *reuse)
	}
	if err != nil {
		if !*reuse && errors.Is(err, budget.ErrInvalid) && revokedKey(ctx, db.KeyStore(), name) {
			return budget.Invalid("name", name, "a revoked key has this name; give --reuse to take it again (its limits and their windows stay)")
		}
		return err
	}
	if ls, err := db.Limits(ctx, ""); err == nil && !anyApplies(ls, name, placed) {
		fmt.Fprintf(m.Stderr, "budget: warning: key %q has no limits of its own, of a team or an org, and there are no default limits: it is unlimited until you set one ('budget limit set --key %s ...' or '--default')\n", name, name)
	}
	if *asJSON {
		return writeJSON(m.Stdout, struct {
			Name   string `json:"name"`
			Secret string `json:"secret"`
		}{name, secret})
	}
	fmt.Fprintf(m.Stderr, "gateway key %s created; store its secret now, it is not shown again:\n", name)
	_, err = fmt.Fprintln(m.Stdout, secret)
	return err
}

// keyRules parses --expires and --models into a key's rules (field
// expires: after now).
func keyRules(expires, models string, now time.Time) (gatekey.Key, error) {
	var k gatekey.Key
	if expires = strings.TrimSpace(expires); expires != "" {
		t, err := time.Parse(time.RFC3339Nano, expires)
		if err != nil {
			return k, budget.Invalid("expires", expires, "want an RFC3339 time such as 2026-03-02T09:00:00Z")
		}
		if err := gatekey.CheckExpiry(t, now); err != nil {
			return k, err
		}
		k.ExpiresAt = t.UTC()
	}
	if models = strings.TrimSpace(models); models != "" {
		var err error
		if k.Models, err = gatekey.ModelPatterns(strings.Split(models, ",")); err != nil {
			return k, err
		}
	}
	return k, nil
}

// revokedKey reports whether the gateway key name exists and is revoked.
// Only for a message: a failed lookup is "no".
func revokedKey(ctx context.Context, s proxy.KeyStore, name string) bool {
	keys, err := s.ListKeys(ctx)
	if err != nil {
		return false
	}
	i := slices.IndexFunc(keys, func(k gatekey.Key) bool { return k.Name == name })
	return i >= 0 && !keys[i].RevokedAt.IsZero()
}

// keyTeams maps each key placed in a team to the team.
func keyTeams(ctx context.Context, db *tokenbudget.DB) (map[string]string, error) {
	ts, err := db.Teams(ctx)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, t := range ts {
		for _, k := range t.Keys {
			m[k] = t.Name
		}
	}
	return m, nil
}

// keyName reads the one NAME argument and validates it.
func keyName(cmd string, pos []string) (string, error) {
	switch len(pos) {
	case 0:
		return "", usagef(cmd, "missing key name")
	case 1:
	default:
		return "", usagef(cmd, "unexpected argument %q", pos[1])
	}
	name := strings.TrimSpace(pos[0])
	return name, proxy.ValidKeyName(name)
}

const keyLsHelp = `usage: budget key ls [--at T] [--json]

Lists the gateway keys by name: its team ("-" for none), when each was created, its state at --at
(default now): active, rotating (its previous secret still works, until
the time shown), expired (past its --expires) or revoked; and when it was
last used, to within a minute (a proxy records a key's use at most once a
minute); when it expires and the models it may ask for. Secrets are never
shown. With --json prints {"keys": [{"name", "team", "created_at",
"revoked", "state", "revoked_at", "rotating_until", "last_used_at",
"expires_at", "models"}]} (times null when they do not apply; models []
for any model).

`

// keyObj is k as 'key ls --json' lists it at now; teams maps keys to
// their teams.
func keyObj(k *gatekey.Key, teams map[string]string, now time.Time) jsonview.Key {
	return jsonview.KeyOf(k, teams[k.Name], now)
}

func (m *Main) runKeyLs(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("key ls")
	dsn := m.dbFlag(fs)
	at := m.atFlag(fs)
	asJSON := fs.Bool("json", false, `print {"keys": [...]}`)
	pos, err := m.parseArgs(fs, keyLsHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("key ls", pos); err != nil {
		return err
	}
	now, err := at()
	if err != nil {
		return err
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	keys, err := db.KeyStore().ListKeys(ctx)
	if err != nil {
		return err
	}
	teams, err := keyTeams(ctx, db)
	if err != nil {
		return err
	}
	if *asJSON {
		out := make([]jsonview.Key, len(keys))
		for i := range keys {
			out[i] = keyObj(&keys[i], teams, now)
		}
		return writeJSON(m.Stdout, struct {
			Keys []jsonview.Key `json:"keys"`
		}{out})
	}
	if len(keys) == 0 {
		_, err = fmt.Fprintln(m.Stdout, "no gateway keys")
		return err
	}
	w := newTable(m.Stdout)
	fmt.Fprintln(w, "NAME\tTEAM\tCREATED AT\tSTATE\tLAST USED\tREVOKED AT\tEXPIRES\tMODELS")
	for i := range keys {
		k := &keys[i]
		state, until := jsonview.KeyState(k, now)
		if state == "rotating" {
			state = "rotating until " + ts(until)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.Name, cmp.Or(teams[k.Name], "-"), ts(k.CreatedAt), state,
			tsText(k.LastUsedAt), tsText(k.RevokedAt), tsText(k.ExpiresAt), cmp.Or(strings.Join(k.Models, ","), "any"))
	}
	return w.Flush()
}

const keyRotateHelp = `usage: budget key rotate NAME [--grace D] [--at T] [--json]

Gives the gateway key NAME a new secret and prints it, shown only this once
(with --json {"name", "secret"}, as 'key add'). The name keeps its limits
and their windows. The old secret keeps working for --grace (default 1h),
time to roll the new one out; --grace 0s refuses it at once (a running
proxy trusts a lookup for up to 5 seconds, so allow that much). A secret
an earlier rotation replaced stops working now. An unknown name exits 4,
a revoked one 2 ('key add --reuse' takes a revoked name again).

`

func (m *Main) runKeyRotate(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("key rotate")
	dsn := m.dbFlag(fs)
	at := m.atFlag(fs)
	grace := fs.Duration("grace", proxy.DefaultRotateGrace, "how long the old secret keeps working (0s: not at all)")
	asJSON := fs.Bool("json", false, `print {"name", "secret"}`)
	pos, err := m.parseArgs(fs, keyRotateHelp, args)
	if err != nil {
		return err
	}
	name, err := keyName("key rotate", pos)
	if err != nil {
		return err
	}
	if *grace < 0 {
		return budget.Invalid("grace", *grace, "must not be negative")
	}
	now, err := at()
	if err != nil {
		return err
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	secret, err := proxy.RotateKey(ctx, db.KeyStore(), name, *grace, now)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(m.Stdout, struct {
			Name   string `json:"name"`
			Secret string `json:"secret"`
		}{name, secret})
	}
	if *grace > 0 {
		fmt.Fprintf(m.Stderr, "gateway key %s rotated; its old secret works until %s. Store the new secret now, it is not shown again:\n", name, ts(now.Add(*grace)))
	} else {
		fmt.Fprintf(m.Stderr, "gateway key %s rotated; its old secret no longer works. Store the new secret now, it is not shown again:\n", name)
	}
	_, err = fmt.Fprintln(m.Stdout, secret)
	return err
}

const keyRevokeHelp = `usage: budget key revoke NAME [--at T]

Revokes the gateway key NAME: a running proxy refuses it (401) within 5
seconds, the time it trusts a key it looked up. The name stays taken.
Revoking a revoked key is no error (exit 0); an unknown name exits 4.

`

func (m *Main) runKeyRevoke(ctx context.Context, args []string) error {
	return m.runRevoke(ctx, args, "key revoke", keyRevokeHelp, keyName, func(ctx context.Context, db *tokenbudget.DB, name string, at time.Time) (bool, error) {
		return db.KeyStore().RevokeKey(ctx, name, at)
	})
}

// runRevoke is a revoke command (key revoke, admin token revoke): NAME
// read by name, revoked at --at, "NAME revoked" or "NAME was already
// revoked" on stdout.
func (m *Main) runRevoke(ctx context.Context, args []string, cmd, help string, name func(string, []string) (string, error),
	revoke func(context.Context, *tokenbudget.DB, string, time.Time) (bool, error)) (err error) {
	fs := newFlagSet(cmd)
	dsn := m.dbFlag(fs)
	at := m.atFlag(fs)
	pos, err := m.parseArgs(fs, help, args)
	if err != nil {
		return err
	}
	n, err := name(cmd, pos)
	if err != nil {
		return err
	}
	now, err := at()
	if err != nil {
		return err
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	revoked, err := revoke(ctx, db, n, now)
	if err != nil {
		return err
	}
	if !revoked {
		_, err = fmt.Fprintf(m.Stdout, "%s was already revoked\n", n)
		return err
	}
	_, err = fmt.Fprintf(m.Stdout, "%s revoked\n", n)
	return err
}

// anyApplies reports whether an enabled limit of ls is key's own, a
// default, or the team's or its org's.
func anyApplies(ls []budget.Limit, key string, team budget.Team) bool {
	for i := range ls {
		l := &ls[i]
		if !l.Enabled {
			continue
		}
		switch l.Level() {
		case budget.LevelDefault:
			return true
		case budget.LevelKey:
			if l.Key == key {
				return true
			}
		case budget.LevelTeam:
			if team.Name != "" && l.Team == team.Name {
				return true
			}
		case budget.LevelOrg:
			if team.Org != "" && l.Org == team.Org {
				return true
			}
		}
	}
	return false
}
