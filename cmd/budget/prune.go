package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

const pruneHelp = `usage: budget prune [--db PATH] --before T [--json]

Deletes the usage events before T (RFC3339 or YYYY-MM-DD), rounded down to
a UTC midnight, in one transaction, keeping their daily rollups: reports
over those days are unchanged, and 'budget verify' then checks the rollups
of the days events still cover. Pruning to a horizon already passed
deletes nothing.

It refuses (exit 2, naming --before and why, nothing deleted) a T on or
after today's UTC midnight, one that would take events from a limit's
current window (its counters may still need to be seeded from them), from
a reservation that may still settle, or from days whose rollups disagree
with their events. Afterwards 'budget record' and 'budget import' of an
event before the horizon exit 2: its request id could no longer be
deduplicated. Uses the real clock (no --at).

Prints what it deleted, or {"before", "deleted"} with --json.

`

func (m *Main) runPrune(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("prune")
	dsn := m.dbFlag(fs)
	before := fs.String("before", "", "delete events before this instant (RFC3339 or YYYY-MM-DD), rounded down to a UTC day (required)")
	asJSON := fs.Bool("json", false, `print {"before", "deleted"}`)
	pos, err := m.parseArgs(fs, pruneHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("prune", pos); err != nil {
		return err
	}
	if strings.TrimSpace(*before) == "" {
		return usagef("prune", "--before is required")
	}
	t, err := budget.ParseInstant("before", *before)
	if err != nil {
		return err
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	res, err := db.Prune(ctx, t)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(m.Stdout, pruneObj(res))
	}
	_, err = fmt.Fprintln(m.Stdout, pruneText(res, budget.Day(t)))
	return err
}

// pruneJSON is what prune --json prints.
type pruneJSON struct {
	Before  string `json:"before"`  // the prune horizon now
	Deleted int64  `json:"deleted"` // events deleted
}

func pruneObj(r budget.PruneResult) pruneJSON { return pruneJSON{ts(r.Before), r.Deleted} }

// pruneText says what a prune to cut (a UTC midnight) did.
func pruneText(r budget.PruneResult, cut time.Time) string {
	if r.Before.After(cut) {
		return fmt.Sprintf("nothing to prune: the events before %s were pruned already", ts(r.Before))
	}
	return fmt.Sprintf("deleted %d events before %s; their daily rollups remain", r.Deleted, ts(r.Before))
}
