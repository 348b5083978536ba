package main

import (
	"context"
	"fmt"
	"text/tabwriter"
)

const verifyHelp = `usage: budget verify [--db PATH] [--json]

Compares every counter row with the usage history's sum over its window and
lists the rows that disagree. Writes nothing. Exit 5 when any drifted. With
--json prints {"drifted": [{"limit_id", "window_start", "counter", "history"}]}.

`

func (m *Main) runVerify(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("verify")
	dsn := m.dbFlag(fs)
	asJSON := fs.Bool("json", false, `print {"drifted": [...]}`)
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
	drift, err := db.Verify(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		type driftJSON struct {
			LimitID     string `json:"limit_id"`
			WindowStart string `json:"window_start"`
			Counter     int64  `json:"counter"`
			History     int64  `json:"history"`
		}
		out := struct {
			Drifted []driftJSON `json:"drifted"`
		}{make([]driftJSON, len(drift))}
		for i, d := range drift {
			out.Drifted[i] = driftJSON{d.LimitID, ts(d.WindowStart), d.Counter, d.History}
		}
		err = writeJSON(m.Stdout, out)
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
	if err == nil && len(drift) > 0 {
		err = errDrift
	}
	return err
}
