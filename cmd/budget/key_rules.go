package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/gatekey"
)

const keySetHelp = `usage: budget key set NAME [--expires T|never] [--models PATTERN,...|any] [--at T] [--json]

Changes the rules of the gateway key NAME, only those given: --expires T
(RFC3339, after --at; "never" removes the expiry) and --models (names or
patterns with * and ?, comma-separated; "any" removes the restriction).
The key's secret, team and limits are unchanged. An unknown name exits 4;
an expiry not in the future exits 2. With --json prints the key as 'key ls
--json' lists it.

`

func (m *Main) runKeySet(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("key set")
	dsn := m.dbFlag(fs)
	at := m.atFlag(fs)
	expires := fs.String("expires", "", `when the key stops working, RFC3339, or "never"`)
	models := fs.String("models", "", `the models the key may ask for, comma-separated, or "any"`)
	asJSON := fs.Bool("json", false, "print the key as 'key ls --json' lists it")
	pos, err := m.parseArgs(fs, keySetHelp, args)
	if err != nil {
		return err
	}
	name, err := keyName("key set", pos)
	if err != nil {
		return err
	}
	now, err := at()
	if err != nil {
		return err
	}
	var c gatekey.KeyChange
	switch e := strings.TrimSpace(*expires); e {
	case "":
	case "never":
		c.ExpiresAt = new(time.Time)
	default:
		r, err := keyRules(e, "", now)
		if err != nil {
			return err
		}
		c.ExpiresAt = &r.ExpiresAt
	}
	switch ms := strings.TrimSpace(*models); ms {
	case "":
	case "any":
		c.Models = &[]string{}
	default:
		r, err := keyRules("", ms, now)
		if err != nil {
			return err
		}
		c.Models = &r.Models
	}
	if c.ExpiresAt == nil && c.Models == nil {
		return usagef("key set", "nothing to change: give --expires or --models")
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	k, err := db.KeyStore().UpdateKey(ctx, name, c, now)
	if err != nil {
		return err
	}
	if !*asJSON {
		_, err = fmt.Fprintf(m.Stdout, "%s: expires %s, models %s\n", k.Name, tsText(k.ExpiresAt), strings.Join(cmpModels(k.Models), ","))
		return err
	}
	teams, err := keyTeams(ctx, db)
	if err != nil {
		return err
	}
	return writeJSON(m.Stdout, keyObj(&k, teams, now))
}

func cmpModels(ms []string) []string {
	if len(ms) == 0 {
		return []string{"any"}
	}
	return ms
}
