package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/jsonview"
)

const inspectHelp = `usage: budget inspect [--key K | --team T | --org O] [--at T] [--rollovers N] [--wide | --json]

Shows every limit, disabled ones too, in the window holding --at (default
now; a given --at counts only the window's usage up to it, read from the
history), then the newest rollovers (default 20) and the parked providers.
Writes nothing. Without a flag it shows every limit but the defaults (they
have no usage of their own); --key K shows what applies to K: its own
limits, its team's and its org's, and the defaults with K's usage; --team T
and --org O show only that team's or org's own limits, with its usage. A
per-user (*) limit shows one entry per end user with usage in the window, a
per-value tag limit (NAME=*) one per value ("tag" in --json).

By default each limit takes two lines that fit in 100 columns:
  ID  OWNER  SCOPE  METRIC  WINDOW
    BAR  USED/LIMIT  RESERVED  USED%  RUNS OUT  RESETS
BAR has 20 cells: █ used, ▒ reserved, · remaining (any non-zero amount
shows at least one cell, only a full limit fills the bar). OWNER is the
key, team:T, org:O, or (default) after the key it is counted for. LIMIT is
the limit in force at --at, raises included. Amounts of usd limits are in
dollars. RUNS OUT is when the room left runs out at the current pace (the
usage of the most recent quarter of the elapsed window, at least its last
minute): "in 3h20m", "now", "-" when not before the reset, "disabled" for
a limit that is not enforced. RESETS is the end of the window (UTC) and
the time left until it from --at; never for a once window. Ids, owners and scope values longer
than 20 characters are cut to 17 and "..."; a calendar WINDOW that does not
fit in what is left of the 100 columns loses its zone.

With --wide prints one wide table row per limit, every field in full, with
FORECAST (the usage at the reset at the current pace) and RUNS OUT as an
instant. With --json prints {"at", "limits", "rollovers", "providers"};
each limit has forecast_used and exhausts_at (null where none).

`

// defaultRollovers is how many rollovers inspect shows by default.
const defaultRollovers = 20

func (m *Main) runInspect(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("inspect")
	dsn := m.dbFlag(fs)
	key := fs.String("key", "", "show what applies to this key, with its usage")
	team := fs.String("team", "", "show only this team's own limits")
	org := fs.String("org", "", "show only this org's own limits")
	at := m.atFlag(fs)
	n := fs.Int("rollovers", defaultRollovers, "how many of the newest rollovers to show")
	asJSON := fs.Bool("json", false, `print {"at", "limits", "rollovers", "providers"}`)
	wide := fs.Bool("wide", false, "print the full table, one wide row per limit")
	pos, err := m.parseArgs(fs, inspectHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("inspect", pos); err != nil {
		return err
	}
	now, err := at()
	if err != nil {
		return err
	}
	if *n < 0 {
		return budget.Invalid("rollovers", *n, "must be 0 or more")
	}
	level, owner, err := inspectOwner(*key, *team, *org)
	if err != nil {
		return err
	}

	db, err := m.openDB(ctx, *dsn, dbOptions{now: fixedClock(now)})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	var r budget.Report
	switch {
	case visited(fs)["at"]: // a past instant: count only what came before it
		r, err = db.InspectBefore(ctx, level, owner, now, *n)
	case level == budget.LevelKey:
		r, err = db.Inspect(ctx, owner, now, *n)
	default:
		r, err = db.InspectOwned(ctx, level, owner, now, *n)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(m.Stdout, struct {
			At        string            `json:"at"`
			Limits    []jsonview.Status `json:"limits"`
			Rollovers []rolloverJSON    `json:"rollovers"`
			Providers []providerJSON    `json:"providers"`
		}{ts(r.At), jsonview.Statuses(r.Limits, r.Forecasts, r.At), rolloverObjs(r.Rollovers), providerObjs(r.Providers)})
	}
	if *wide {
		return writeReport(m, &r)
	}
	return writeCompactReport(m, &r)
}

// inspectOwner is whose limits inspect shows: a key's (LevelKey; every
// key's when owner is ""), a team's or an org's. At most one of the flags
// may be given.
func inspectOwner(key, team, org string) (budget.Level, string, error) {
	key, team, org = strings.TrimSpace(key), strings.TrimSpace(team), strings.TrimSpace(org)
	switch {
	case key != "" && team != "":
		return "", "", budget.Invalid("team", team, "give --key, --team or --org, not two of them")
	case key != "" && org != "", team != "" && org != "":
		return "", "", budget.Invalid("org", org, "give --key, --team or --org, not two of them")
	case team != "":
		return budget.LevelTeam, team, budget.CheckName("team", team)
	case org != "":
		return budget.LevelOrg, org, budget.CheckName("org", org)
	}
	return budget.LevelKey, key, nil
}

// writeReport prints a report as tables: limits, rollovers, parked providers.
func writeReport(m *Main, r *budget.Report) error {
	w := newTable(m.Stdout)
	fmt.Fprintf(w, "at %s\n\n", ts(r.At))
	if len(r.Limits) == 0 {
		fmt.Fprintln(w, "no limits")
	} else {
		fmt.Fprintln(w, statusHeader+"\tFORECAST\tRUNS OUT")
		for i := range r.Limits {
			s := &r.Limits[i]
			forecast, out := "-", "-"
			if f := r.Forecasts[i]; f != nil {
				if f.ForecastUsed >= 0 {
					forecast = amountText(&s.Limit, f.ForecastUsed)
				}
				out = tsText(f.ExhaustsAt)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\n", statusLine(s), forecast, out)
		}
	}
	fmt.Fprintln(w)
	writeRollovers(w, r.Rollovers, func(id string) string { return id })
	if len(r.Providers) > 0 {
		fmt.Fprintln(w)
		writeProviders(w, r.Providers, r.At)
	}
	return w.Flush()
}

// writeRollovers prints the rollover table (or says there are none), each
// limit id through id.
func writeRollovers(w io.Writer, ros []budget.Rollover, id func(string) string) {
	if len(ros) == 0 {
		fmt.Fprintln(w, "no rollovers")
		return
	}
	fmt.Fprintln(w, "ROLLOVER OF\tPREV WINDOW START\tPREV USED\tWINDOW START\tLOGGED AT")
	for _, ro := range ros {
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", id(ro.LimitID), ts(ro.PrevWindowStart), ro.PrevUsed, ts(ro.WindowStart), ts(ro.LoggedAt))
	}
}
