package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/tokenbudget/tokenbudget/budget"
)

const commitHelp = `usage: budget commit ID [--input N] [--output N] [--reasoning N]
	[--cache-read N] [--cache-write N] [--json]

Settles reservation ID with the request's actual usage: records it as an
event at the reservation's instant (request id = ID; the reservation's key,
provider and model) and frees its holds and leases. The actual may be larger
or smaller than the estimate. A commit after the reservation expired still
records the usage and says so (exit 0). Exit 4 when ID is unknown or already
settled. Prints ID, or {"request_id", "expired"} with --json.

`

func (m *Main) runCommit(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("commit")
	dsn := m.dbFlag(fs)
	var u budget.Usage
	fs.Int64Var(&u.Input, "input", 0, "prompt tokens, cached or not")
	fs.Int64Var(&u.Output, "output", 0, "generated tokens other than reasoning")
	fs.Int64Var(&u.Reasoning, "reasoning", 0, "reasoning tokens")
	fs.Int64Var(&u.CacheRead, "cache-read", 0, "prompt tokens read from the cache (part of --input)")
	fs.Int64Var(&u.CacheWrite, "cache-write", 0, "prompt tokens written to the cache (part of --input)")
	asJSON := fs.Bool("json", false, `print {"request_id", "expired"}`)
	pos, err := m.parseArgs(fs, commitHelp, args)
	if err != nil {
		return err
	}
	id, err := reservationID("commit", pos)
	if err != nil {
		return err
	}
	// Validate the token counts as Commit will; the key, provider, model and
	// instant come from the reservation.
	check := u
	check.Key, check.RequestID, check.At = "reservation", id, m.Now()
	if _, err := check.Normalize(check.At); err != nil {
		return err
	}

	db, err := m.openDB(ctx, *dsn, dbOptions{})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	s, err := db.Commit(ctx, id, u)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(m.Stdout, struct {
			RequestID string `json:"request_id"`
			Expired   bool   `json:"expired"`
		}{s.RequestID, s.Expired})
	}
	if s.Expired {
		_, err = fmt.Fprintf(m.Stdout, "%s expired: the reservation had expired; its usage is recorded all the same\n", s.RequestID)
		return err
	}
	_, err = fmt.Fprintln(m.Stdout, s.RequestID)
	return err
}

// reservationID is the one positional argument of commit and release.
func reservationID(cmd string, pos []string) (string, error) {
	if len(pos) != 1 {
		return "", usagef(cmd, "want exactly one reservation id, got %d arguments", len(pos))
	}
	id := strings.TrimSpace(pos[0])
	if id == "" {
		return "", budget.Invalid("id", pos[0], "must not be empty")
	}
	return id, nil
}
