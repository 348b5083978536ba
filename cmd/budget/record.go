package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/tokenbudget/tokenbudget/budget"
)

const recordHelp = `usage: budget record --key K --provider P --model M [--user U] [--tag NAME=VALUE]... [--input N]
	[--output N] [--reasoning N] [--cache-read N] [--cache-write N] [--request-id ID] [--at T] [--json]

Records one request's usage and waits until it is written. --input counts
every prompt token; --cache-read and --cache-write are a breakdown inside it.
--user is the end user the request was for: user limits count it; each
--tag is what it was for (project=atlas): tag limits count it. The event
is charged to the key's team and org as they are when it is written.
A request id already recorded for the key is a duplicate: nothing changes.
Prints the request id, or {"request_id", "duplicate"} with --json.

`

func (m *Main) runRecord(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("record")
	dsn := m.dbFlag(fs)
	var u budget.Usage
	fs.StringVar(&u.Key, "key", "", "API key (required)")
	fs.StringVar(&u.Provider, "provider", "", "provider (required)")
	fs.StringVar(&u.Model, "model", "", "model (required)")
	fs.StringVar(&u.User, "user", "", "end user the request was for")
	tags := tagFlag(fs)
	fs.Int64Var(&u.Input, "input", 0, "prompt tokens, cached or not")
	fs.Int64Var(&u.Output, "output", 0, "generated tokens other than reasoning")
	fs.Int64Var(&u.Reasoning, "reasoning", 0, "reasoning tokens")
	fs.Int64Var(&u.CacheRead, "cache-read", 0, "prompt tokens read from the cache (part of --input)")
	fs.Int64Var(&u.CacheWrite, "cache-write", 0, "prompt tokens written to the cache (part of --input)")
	fs.StringVar(&u.RequestID, "request-id", "", "request id, unique per key (default: generated)")
	at := m.atFlag(fs)
	asJSON := fs.Bool("json", false, `print {"request_id", "duplicate"}`)
	pos, err := m.parseArgs(fs, recordHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("record", pos); err != nil {
		return err
	}
	if u.At, err = at(); err != nil {
		return err
	}
	if u.Tags, err = tags(); err != nil {
		return err
	}
	if u, err = validUsage(u); err != nil {
		return err
	}

	db, err := m.openDB(ctx, *dsn, dbOptions{create: true})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	dup, err := db.RecordSync(ctx, u)
	if err == nil && db.Stats().Unpriced > 0 {
		fmt.Fprintf(m.Stderr, "budget: warning: no price for model %q of provider %q, and a dollar limit applies: recorded at $0 ('budget price set' prices later events)\n", u.Model, u.Provider)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(m.Stdout, struct {
			RequestID string `json:"request_id"`
			Duplicate bool   `json:"duplicate"`
		}{u.RequestID, dup[0]})
	}
	if dup[0] {
		_, err = fmt.Fprintf(m.Stdout, "%s duplicate: already recorded, nothing changed\n", u.RequestID)
		return err
	}
	_, err = fmt.Fprintln(m.Stdout, u.RequestID)
	return err
}

// validUsage validates an event as RecordSync will, and also requires the
// provider and model the CLI's record and import need. u.At must be set.
func validUsage(u budget.Usage) (budget.Usage, error) {
	u, err := u.Normalize(u.At)
	if err != nil {
		return u, err
	}
	if strings.TrimSpace(u.Provider) == "" {
		return u, budget.Invalid("provider", u.Provider, "is required")
	}
	if strings.TrimSpace(u.Model) == "" {
		return u, budget.Invalid("model", u.Model, "is required")
	}
	return u, nil
}
