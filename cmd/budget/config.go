package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
)

const configHelp = `usage: budget config export [--db PATH]
       budget config import [--db PATH] [--json] [FILE|-]
       budget config apply [--db PATH] [--dry-run] [--prune] [--json] FILE|-

export writes the database's configuration to stdout as one JSON document,
everything 'config import' needs to recreate it apart from the usage history
('budget export'):

  {"version": 1,
   "limits": [{"id", "level", "owner", "scope", "scope_value", "metric",
               "limit", "window", "reset_time", "timezone", "anchor",
               "enabled", "raises": [{"id", "by", "until", "at"}], "alerts"}],
   "prices": [{"provider", "model", "tier", "above_input", "from", "input",
               "output", "cache_read", "cache_write", "reasoning"}],
   "teams":  [{"name", "org", "keys"}],
   "keys":   [{"name", "hash", "created_at", "revoked_at", "prev_hash",
               "prev_until", "expires_at", "models"}]}

limit is the limit as set (its raises are listed apart), in the metric's
unit (micro-dollars for usd); anchor is where a once window's balance
starts; owner is null for a default limit. Prices are dollars per million
tokens; tier and above_input are left out for the standard tier's base
row. keys are the gateway keys: the SHA-256 of their secrets, never the
secrets, so a key keeps working after the move; expires_at and models are
left out when the key has none. The audit log is not part of it. Times are RFC3339 with
nanoseconds, UTC; null is what does not apply. Writes nothing.

import reads such a document, as JSON or YAML (FILE, or stdin when FILE is - or missing) and
validates all of it before it writes anything: bad input exits 2 naming the
entry and the field. It then writes the teams, limits, raises and prices in
one transaction (limits by id: created, or updated in place; raises and
prices added where missing), then the gateway keys; a key already in the
database with the same secret is left as it is, one with another secret is
refused (exit 2) before anything is written. Importing the same document
twice changes nothing the second time. Creates the database when missing.
Prints what it imported, or {"limits", "prices", "teams", "keys",
"keys_present"} with --json (keys_present: gateway keys already there).

apply makes the database what such a document says, in one transaction,
and prints the changes: see 'budget config apply -h'.

`

func (m *Main) runConfig(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(m.Stderr, configHelp)
		return usagef("config", "missing subcommand: export, import or apply")
	}
	switch args[0] {
	case "export":
		return m.runConfigExport(ctx, args[1:])
	case "import":
		return m.runConfigImport(ctx, args[1:])
	case "apply":
		return m.runConfigApply(ctx, args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Fprint(m.Stdout, configHelp)
		return nil
	}
	return usagef("config", "unknown subcommand %q: want export, import or apply", args[0])
}

func (m *Main) runConfigExport(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("config export")
	dsn := m.dbFlag(fs)
	pos, err := m.parseArgs(fs, configHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("config export", pos); err != nil {
		return err
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	d, err := db.Definitions(ctx)
	if err != nil {
		return err
	}
	ks, err := db.KeyStore().ListKeys(ctx)
	if err != nil {
		return err
	}
	return writeJSON(m.Stdout, configObj(&d, ks))
}

func (m *Main) runConfigImport(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("config import")
	dsn := m.dbFlag(fs)
	asJSON := fs.Bool("json", false, `print {"limits", "prices", "teams", "keys", "keys_present"}`)
	pos, err := m.parseArgs(fs, configHelp, args)
	if err != nil {
		return err
	}
	var r io.Reader = m.Stdin
	switch {
	case len(pos) > 1:
		return usagef("config import", "unexpected argument %q", pos[1])
	case len(pos) == 1 && pos[0] != "-":
		f, err := os.Open(pos[0])
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	now := m.Now()
	d, ks, err := parseConfig(r, now)
	if err != nil {
		return err
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{create: true})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	store := db.KeyStore()
	fresh, err := newKeys(ctx, store, ks)
	if err != nil {
		return err
	}
	if err := db.LoadDefinitions(ctx, d); err != nil {
		return err
	}
	for _, k := range fresh {
		if err := insertKey(ctx, store, k); err != nil {
			return fmt.Errorf("gateway key %s (the limits, prices and teams are imported, and the keys before it): %w", k.Name, err)
		}
	}
	out := struct {
		Limits      int `json:"limits"`
		Prices      int `json:"prices"`
		Teams       int `json:"teams"`
		Keys        int `json:"keys"`
		KeysPresent int `json:"keys_present"`
	}{len(d.Limits), len(d.Prices), len(d.Teams), len(fresh), len(ks) - len(fresh)}
	if *asJSON {
		return writeJSON(m.Stdout, out)
	}
	_, err = fmt.Fprintf(m.Stdout, "imported %d limits, %d prices, %d teams, %d gateway keys (%d already there)\n",
		out.Limits, out.Prices, out.Teams, out.Keys, out.KeysPresent)
	return err
}

// newKeys are the keys of ks not in the store yet. A key whose name the
// store has with another secret, or whose secret another name has, is
// invalid input: nothing is written.
func newKeys(ctx context.Context, s gatekey.Store, ks []gatekey.Key) ([]gatekey.Key, error) {
	have, err := s.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]gatekey.Key, len(have))
	byHash := make(map[string]string, 2*len(have))
	for _, k := range have {
		byName[k.Name] = k
		byHash[k.Hash] = k.Name
		if k.PrevHash != "" {
			byHash[k.PrevHash] = k.Name
		}
	}
	var out []gatekey.Key
	for _, k := range ks {
		cur, ok := byName[k.Name]
		switch {
		case ok && cur.Hash == k.Hash && cur.RevokedAt.IsZero() == k.RevokedAt.IsZero():
			continue // imported before
		case ok:
			return nil, budget.Invalid("keys", k.Name, "is a gateway key of this database with another secret or state; revoke or rename one of them")
		}
		for _, h := range []string{k.Hash, k.PrevHash} {
			if other, ok := byHash[h]; ok && h != "" {
				return nil, budget.Invalid("keys", k.Name, "has the secret of this database's gateway key "+other)
			}
		}
		out = append(out, k)
	}
	return out, nil
}

// insertKey writes k as it was, in one write: its previous secret,
// revocation and last use included.
func insertKey(ctx context.Context, s gatekey.Store, k gatekey.Key) error {
	return s.InsertKey(ctx, k)
}
