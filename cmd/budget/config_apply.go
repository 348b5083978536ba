package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
)

const configApplyHelp = `usage: budget config apply [--db PATH] [--dry-run] [--prune] [--json] FILE|-

Makes the database's limits, teams, prices and gateway keys what FILE says
(the document 'config export' writes, as JSON or as YAML), in one
transaction, and prints what changed, one line each ("+" created, "~"
changed: field old -> new, "-" deleted or revoked), or "no changes".

A limit is matched by its identity (owner, scope, value, metric, window),
not its id: one whose identity is unchanged keeps its id, its counters and
its raises, and only its limit, enabled, reset time, timezone and alerts
change; a limit of the document with an id the database gives another
identity replaces that limit. Raises missing are added (none is removed:
raises end by themselves). Teams are matched by name, and their keys
placed and taken out to match. Prices by provider, model, tier, above_input
and from. Gateway keys by name: the document's hash, rotation, revocation,
expiry and models replace the stored ones, so a document exported after a
rotation applies cleanly. With --prune, what the document does not name is
deleted: limits, teams and prices, and live gateway keys are revoked.
--dry-run prints the changes and writes nothing. Bad input (exit 2, naming
the entry and the field) writes nothing. Each change is logged in the
audit log as made by "config FILE"; an apply that changes nothing logs
nothing. With --json prints {"changes": [{"action", "object", "object_id",
"before", "after"}], "dry_run"}.

`

func (m *Main) runConfigApply(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("config apply")
	dsn := m.dbFlag(fs)
	dry := fs.Bool("dry-run", false, "print the changes, write nothing")
	prune := fs.Bool("prune", false, "delete what the file does not name (revoke its gateway keys)")
	asJSON := fs.Bool("json", false, `print {"changes": [...], "dry_run"}`)
	pos, err := m.parseArgs(fs, configApplyHelp, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		return usagef("config apply", "missing FILE (- for stdin)")
	case len(pos) > 1:
		return usagef("config apply", "unexpected argument %q", pos[1])
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{create: !*dry})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	changes, err := applyConfigFile(ctx, db.Tracker, pos[0], m.Stdin, m.Now(), budget.ApplyOptions{Prune: *prune, DryRun: *dry})
	if err != nil {
		return err
	}
	if *asJSON {
		type change struct {
			Action   string          `json:"action"`
			Object   string          `json:"object"`
			ObjectID string          `json:"object_id"`
			Before   json.RawMessage `json:"before"`
			After    json.RawMessage `json:"after"`
		}
		out := make([]change, len(changes))
		for i, c := range changes {
			out[i] = change{Action: string(c.Action), Object: string(c.Object), ObjectID: c.ObjectID, Before: nullJSON(c.Before), After: nullJSON(c.After)}
		}
		return writeJSON(m.Stdout, struct {
			Changes []change `json:"changes"`
			DryRun  bool     `json:"dry_run"`
		}{out, *dry})
	}
	if err := writeChanges(m.Stdout, changes); err != nil {
		return err
	}
	if *dry && len(changes) > 0 {
		fmt.Fprintln(m.Stderr, "budget: dry run: nothing was written")
	}
	return nil
}

// applyConfigFile reads the document at path ("-": stdin) and applies it
// to t's database with o, as made by "config PATH". A document that does not parse
// changes nothing.
func applyConfigFile(ctx context.Context, t *budget.Tracker, path string, stdin io.Reader, now time.Time, o budget.ApplyOptions) ([]budget.Change, error) {
	r := stdin
	if path != "-" || stdin == nil {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	d, ks, err := parseConfig(r, now)
	if err != nil {
		return nil, err
	}
	o.Also = gatekey.ApplyKeys(ks)
	ctx = budget.WithActor(ctx, budget.Actor{Kind: budget.ActorConfig, Name: path})
	return t.ApplyDefinitions(ctx, d, o)
}

// writeChanges prints changes one a line, or "no changes".
func writeChanges(w io.Writer, changes []budget.Change) error {
	if len(changes) == 0 {
		_, err := fmt.Fprintln(w, "no changes")
		return err
	}
	for i := range changes {
		if _, err := fmt.Fprintln(w, budget.FormatChange(&changes[i])); err != nil {
			return err
		}
	}
	return nil
}

// yamlToJSON is data as JSON: JSON as it is, YAML converted (YAML is a
// superset of JSON, but JSON read as such keeps its numbers exact), so
// one strict decoder reads both and names the same fields.
func yamlToJSON(data []byte) ([]byte, error) {
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] == '{' || t[0] == '[' {
		return data, nil
	}
	out, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, budget.Invalid("yaml", "", err.Error())
	}
	return out, nil
}

// nullJSON is raw, or null when there is none.
func nullJSON(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}
