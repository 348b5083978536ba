package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
)

const keyHelp = `usage: budget key <add|ls|revoke> [flags]

	key add NAME     create a gateway key; prints its secret, shown only this once
	key ls           list gateway keys
	key revoke NAME  revoke a key (the proxy refuses it within 5s)
`

func (m *Main) runKey(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(m.Stderr, keyHelp)
		return usagef("key", "missing subcommand: add, ls or revoke")
	}
	switch args[0] {
	case "add":
		return m.runKeyAdd(ctx, args[1:])
	case "ls", "list":
		return m.runKeyLs(ctx, args[1:])
	case "revoke":
		return m.runKeyRevoke(ctx, args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Fprint(m.Stdout, keyHelp)
		return nil
	}
	return usagef("key", "unknown subcommand %q: want add, ls or revoke", args[0])
}

const keyAddHelp = `usage: budget key add NAME [--at T] [--json]

Creates the gateway key NAME for 'budget proxy' and prints its secret: give
it to the application, which sends it as "Authorization: Bearer SECRET" or
"x-api-key: SECRET". Only the SHA-256 of the secret is stored: it is shown
here once and never again. Limits set for --key NAME apply to its requests.
A name that exists, revoked or not, is invalid. With --json prints
{"name", "secret"}.

`

func (m *Main) runKeyAdd(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("key add")
	dsn := m.dbFlag(fs)
	at := m.atFlag(fs)
	asJSON := fs.Bool("json", false, `print {"name", "secret"}`)
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

	db, err := m.openDB(ctx, *dsn, dbOptions{create: true})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	secret, err := proxy.AddKey(ctx, db.Store(), name, now)
	if err != nil {
		return err
	}
	if ls, err := db.Limits(ctx, name); err == nil && !anyEnabled(ls) {
		fmt.Fprintf(m.Stderr, "budget: warning: key %q has no limits of its own and there are no default limits: it is unlimited until you set one ('budget limit set --key %s ...' or '--default')\n", name, name)
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

const keyLsHelp = `usage: budget key ls [--json]

Lists the gateway keys by name: when each was created and whether it is
revoked. Secrets are never shown. With --json prints
{"keys": [{"name", "created_at", "revoked"}]}.

`

func (m *Main) runKeyLs(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("key ls")
	dsn := m.dbFlag(fs)
	asJSON := fs.Bool("json", false, `print {"keys": [...]}`)
	pos, err := m.parseArgs(fs, keyLsHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("key ls", pos); err != nil {
		return err
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	var keys []budget.GatewayKey
	if err := db.Store().View(ctx, func(tx budget.Tx) error {
		var err error
		keys, err = tx.Keys(ctx)
		return err
	}); err != nil {
		return err
	}
	if *asJSON {
		type keyJSON struct {
			Name      string `json:"name"`
			CreatedAt string `json:"created_at"`
			Revoked   bool   `json:"revoked"`
		}
		out := make([]keyJSON, len(keys))
		for i, k := range keys {
			out[i] = keyJSON{k.Name, ts(k.CreatedAt), !k.RevokedAt.IsZero()}
		}
		return writeJSON(m.Stdout, struct {
			Keys []keyJSON `json:"keys"`
		}{out})
	}
	if len(keys) == 0 {
		_, err = fmt.Fprintln(m.Stdout, "no gateway keys")
		return err
	}
	w := tabwriter.NewWriter(m.Stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tCREATED AT\tREVOKED AT")
	for _, k := range keys {
		fmt.Fprintf(w, "%s\t%s\t%s\n", k.Name, ts(k.CreatedAt), tsText(k.RevokedAt))
	}
	return w.Flush()
}

const keyRevokeHelp = `usage: budget key revoke NAME [--at T]

Revokes the gateway key NAME: a running proxy refuses it (401) within 5
seconds, the time it trusts a key it looked up. The name stays taken.
Revoking a revoked key is no error (exit 0); an unknown name exits 4.

`

func (m *Main) runKeyRevoke(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("key revoke")
	dsn := m.dbFlag(fs)
	at := m.atFlag(fs)
	pos, err := m.parseArgs(fs, keyRevokeHelp, args)
	if err != nil {
		return err
	}
	name, err := keyName("key revoke", pos)
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
	already := false
	err = db.Store().Update(ctx, func(tx budget.Tx) error {
		already = false
		keys, err := tx.Keys(ctx)
		if err != nil {
			return err
		}
		for _, k := range keys {
			if k.Name == name {
				if already = !k.RevokedAt.IsZero(); already {
					return nil
				}
				return tx.RevokeKey(ctx, name, now)
			}
		}
		return fmt.Errorf("gateway key %q: %w", name, budget.ErrNotFound)
	})
	if err != nil {
		return err
	}
	if already {
		_, err = fmt.Fprintf(m.Stdout, "%s was already revoked\n", name)
		return err
	}
	_, err = fmt.Fprintf(m.Stdout, "%s revoked\n", name)
	return err
}

func anyEnabled(ls []budget.Limit) bool {
	for i := range ls {
		if ls[i].Enabled {
			return true
		}
	}
	return false
}
