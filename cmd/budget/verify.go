package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/tokenbudget/tokenbudget/budget"
)

const verifyHelp = `usage: budget verify [--db PATH] [--integrity] [--json]

Compares every counter row with the usage history's sum over its window and
lists the rows that disagree, after reading the history table itself and
checking it against the index the counters are seeded from (a damaged page
that the counters' own index hides still shows). --integrity also
runs the database's own check (SQLite integrity_check; PostgreSQL amcheck
where it is installed). Writes nothing. Exit 5 when a counter drifted, 1
when the database is corrupt. With --json prints {"drifted": [{"limit_id",
"window_start", "counter", "history"}]}, plus "corruption" and "notes"
(lists of strings) when there are any, and "unpriced": the number of events
written with no price for their model (stored at $0).

`

func (m *Main) runVerify(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("verify")
	dsn := m.dbFlag(fs)
	asJSON := fs.Bool("json", false, `print {"drifted": [...], "corruption": [...], "notes": [...]}`)
	integrity := fs.Bool("integrity", false, "also run the database's own integrity check (reads every page)")
	pos, err := m.parseArgs(fs, verifyHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("verify", pos); err != nil {
		return err
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	storage, err := db.CheckStorage(ctx, *integrity)
	if err != nil {
		return err
	}
	for _, n := range storage.Notes {
		fmt.Fprintln(m.Stderr, "budget: verify:", n)
	}
	var drift []budget.Drift
	if len(storage.Problems) == 0 {
		// Counters against a damaged history would only add noise.
		if drift, err = db.Verify(ctx); err != nil {
			return err
		}
	}
	if *asJSON {
		type driftJSON struct {
			LimitID     string `json:"limit_id"`
			WindowStart string `json:"window_start"`
			Counter     int64  `json:"counter"`
			History     int64  `json:"history"`
		}
		unpriced, uerr := db.UnpricedEvents(ctx)
		if uerr != nil && len(storage.Problems) == 0 {
			return uerr
		}
		out := struct {
			Drifted    []driftJSON `json:"drifted"`
			Unpriced   int64       `json:"unpriced"`
			Corruption []string    `json:"corruption,omitempty"`
			Notes      []string    `json:"notes,omitempty"`
		}{make([]driftJSON, len(drift)), unpriced, storage.Problems, storage.Notes}
		for i, d := range drift {
			out.Drifted[i] = driftJSON{d.LimitID, ts(d.WindowStart), d.Counter, d.History}
		}
		err = writeJSON(m.Stdout, out)
	} else if len(storage.Problems) > 0 {
		for _, p := range storage.Problems {
			fmt.Fprintln(m.Stderr, "corrupt:", p)
		}
	} else if len(drift) == 0 {
		_, err = fmt.Fprintln(m.Stdout, "ok: every counter matches the usage history")
	} else {
		w := tabwriter.NewWriter(m.Stdout, 0, 8, 2, ' ', 0)
		fmt.Fprintf(w, "%d counters drifted from the usage history\n\n", len(drift))
		fmt.Fprintln(w, "LIMIT\tWINDOW START\tCOUNTER\tHISTORY")
		for _, d := range drift {
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\n", d.LimitID, ts(d.WindowStart), d.Counter, d.History)
		}
		err = w.Flush()
	}
	switch {
	case err != nil:
	case len(storage.Problems) > 0:
		err = fmt.Errorf("the database is corrupt (%d problems); restore it from a backup", len(storage.Problems))
	case len(drift) > 0:
		err = errDrift
	}
	return err
}
