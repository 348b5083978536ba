package main

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

const verifyHelp = `usage: budget verify [--db PATH] [--integrity] [--json]

Compares every counter row with the usage history's sum over its window and
lists the rows that disagree, after reading the history table itself and
checking it against the index the counters are seeded from (a damaged page
that the counters' own index hides still shows). It also compares the daily
rollups ('budget report' reads them) with the events of every day the
events still cover: days before the prune horizon ('budget prune') have
only their rollups, which nothing can check. A counter of a window before
that horizon is checked against the rollups when its pruned part is whole
UTC days (a daily or monthly window); any other (an hourly window, say) is
skipped, counted on stderr and in --json as "not_checkable", never drift.
--integrity also
runs the database's own check (SQLite integrity_check; PostgreSQL amcheck
where it is installed). Writes nothing. Exit 5 when a counter or a rollup
drifted, 1 when the database is corrupt. With --json prints {"drifted":
[{"limit_id", "window_start", "counter", "history"}], "rollups_drifted":
[{"day", "key", "team", "org", "user", "provider", "model", "rollup",
"events"}]} (rollup and events: {"requests", "input", "output",
"reasoning", "cache_read", "cache_write", "cost", "no_price"}, cost in
micro-dollars, no_price the events no price matched), plus "corruption" and
"notes" (lists of strings) when there are any, and "unpriced": the number
of events written with no price for their model (stored at $0), and
"not_checkable": the counters skipped (see above).

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
	var rollups []budget.RollupDrift
	var notCheckable int
	if len(storage.Problems) == 0 {
		// Counters against a damaged history would only add noise.
		res, err := db.VerifyCounters(ctx)
		if err != nil {
			return err
		}
		drift, notCheckable = res.Drifted, res.NotCheckable
		if notCheckable > 0 {
			fmt.Fprintf(m.Stderr, "budget: verify: %d counters not checkable: their windows start or end before the prune horizon other than at a UTC midnight, and the daily rollups cannot tell the hours of a pruned day apart\n", notCheckable)
		}
		if rollups, err = db.VerifyRollups(ctx); err != nil {
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
			Drifted        []driftJSON       `json:"drifted"`
			RollupsDrifted []rollupDriftJSON `json:"rollups_drifted"`
			Unpriced       int64             `json:"unpriced"`
			NotCheckable   int               `json:"not_checkable"`
			Corruption     []string          `json:"corruption,omitempty"`
			Notes          []string          `json:"notes,omitempty"`
		}{make([]driftJSON, len(drift)), rollupDriftObjs(rollups), unpriced, notCheckable, storage.Problems, storage.Notes}
		for i, d := range drift {
			out.Drifted[i] = driftJSON{d.LimitID, ts(d.WindowStart), d.Counter, d.History}
		}
		err = writeJSON(m.Stdout, out)
	} else if len(storage.Problems) > 0 {
		for _, p := range storage.Problems {
			fmt.Fprintln(m.Stderr, "corrupt:", p)
		}
	} else if len(drift) == 0 && len(rollups) == 0 {
		_, err = fmt.Fprintln(m.Stdout, "ok: every counter matches the usage history, and every daily rollup its events")
	} else {
		w := newTable(m.Stdout)
		if len(drift) > 0 {
			fmt.Fprintf(w, "%d counters drifted from the usage history\n\n", len(drift))
			fmt.Fprintln(w, "LIMIT\tWINDOW START\tCOUNTER\tHISTORY")
			for _, d := range drift {
				fmt.Fprintf(w, "%s\t%s\t%d\t%d\n", d.LimitID, ts(d.WindowStart), d.Counter, d.History)
			}
		}
		if len(rollups) > 0 {
			if len(drift) > 0 {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "%d daily rollups drifted from their events\n\n", len(rollups))
			fmt.Fprintln(w, "DAY\tKEY\tTEAM\tORG\tUSER\tPROVIDER\tMODEL\tROLLUP\tEVENTS")
			for _, d := range rollups {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Day.Format(time.DateOnly), d.Key, cmp.Or(d.Team, "-"),
					cmp.Or(d.Org, "-"), cmp.Or(d.User, "-"), d.Provider, d.Model, totalsText(&d.Rollup), totalsText(&d.Events))
			}
		}
		err = w.Flush()
	}
	switch {
	case err != nil:
	case len(storage.Problems) > 0:
		err = fmt.Errorf("the database is corrupt (%d problems); restore it from a backup", len(storage.Problems))
	case len(drift) > 0 || len(rollups) > 0:
		err = errDrift
	}
	return err
}

// rollupDriftJSON is a daily rollup that disagrees with its events.
type rollupDriftJSON struct {
	Day      string     `json:"day"` // YYYY-MM-DD, UTC
	Key      string     `json:"key"`
	Team     string     `json:"team"`
	Org      string     `json:"org"`
	User     string     `json:"user"`
	Provider string     `json:"provider"`
	Model    string     `json:"model"`
	Rollup   totalsJSON `json:"rollup"`
	Events   totalsJSON `json:"events"`
}

// totalsJSON is usage summed; cost in micro-dollars, no_price the events
// no price matched.
type totalsJSON struct {
	Requests   int64 `json:"requests"`
	Input      int64 `json:"input"`
	Output     int64 `json:"output"`
	Reasoning  int64 `json:"reasoning"`
	CacheRead  int64 `json:"cache_read"`
	CacheWrite int64 `json:"cache_write"`
	Cost       int64 `json:"cost"`
	NoPrice    int64 `json:"no_price"`
}

func totalsObj(t *budget.Totals) totalsJSON {
	return totalsJSON{t.Requests, t.Input, t.Output, t.Reasoning, t.CacheRead, t.CacheWrite, t.Cost, t.NoPrice}
}

func rollupDriftObjs(ds []budget.RollupDrift) []rollupDriftJSON {
	out := make([]rollupDriftJSON, len(ds))
	for i := range ds {
		d := &ds[i]
		out[i] = rollupDriftJSON{Day: d.Day.Format(time.DateOnly), Key: d.Key, Team: d.Team, Org: d.Org, User: d.User,
			Provider: d.Provider, Model: d.Model, Rollup: totalsObj(&d.Rollup), Events: totalsObj(&d.Events)}
	}
	return out
}

// totalsText is totals for the verify table.
func totalsText(t *budget.Totals) string {
	return fmt.Sprintf("requests=%d input=%d output=%d reasoning=%d cost=%d", t.Requests, t.Input, t.Output, t.Reasoning, t.Cost)
}
