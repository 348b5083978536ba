package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/tokenbudget/tokenbudget/alert"
	"github.com/tokenbudget/tokenbudget/budget"
)

const alertsHelp = `usage: budget alerts ls [--limit N] [--json]

	alerts ls  list the newest alerts, newest first
`

const alertsLsHelp = `usage: budget alerts ls [--db PATH] [--limit N] [--json]

Lists the newest alerts (default 100), newest first. An alert is logged
when the usage of a limit's window crosses one of its thresholds
('budget limit set --alert 50,80,100'): once per limit, window, threshold,
and key or end user for limits counted per key or user. Any 'budget proxy
--alert-webhook URL' delivers it (at least once); DELIVERED is when a
webhook acknowledged it, "-" until then. SUBJECT is the key a default
limit was counted for, or the end user of a per-user (*) limit, as
key/user for both; "-" for other limits. USED/LIMIT is the window's usage
right after the crossing and the limit in force then; RUNS OUT when the
room left was to run out at the pace of that moment. THRESHOLD "exhausted"
is a window whose limit (one with thresholds) first refused a proxy's or
'budget reserve' reservation for want of room, once per window; USED is
then the usage and holds that left no room.

With --json prints {"alerts": [...]}, each with id, limit_id, level, owner,
subject, kind ("threshold" or "exhausted"), window_start, threshold (null
when exhausted), metric, used, limit, at, forecast_used, exhausts_at and
delivered_at: the document the webhook receives (amounts of usd limits in
micro-dollars).

`

// defaultAlerts is how many alerts alerts ls lists by default.
const defaultAlerts = 100

func (m *Main) runAlerts(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(m.Stderr, alertsHelp)
		return usagef("alerts", "missing subcommand: ls")
	}
	switch args[0] {
	case "ls", "list":
		return m.runAlertsLs(ctx, args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Fprint(m.Stdout, alertsHelp)
		return nil
	}
	return usagef("alerts", "unknown subcommand %q: want ls", args[0])
}

func (m *Main) runAlertsLs(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("alerts ls")
	dsn := m.dbFlag(fs)
	n := fs.Int("limit", defaultAlerts, "how many of the newest alerts to list")
	asJSON := fs.Bool("json", false, `print {"alerts": [...]}`)
	pos, err := m.parseArgs(fs, alertsLsHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("alerts ls", pos); err != nil {
		return err
	}
	if *n < 1 {
		return budget.Invalid("limit", *n, "must be 1 or more")
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	as, err := db.Alerts(ctx, *n)
	if err != nil {
		return err
	}
	if *asJSON {
		objs := make([]alert.Object, len(as))
		for i := range as {
			objs[i] = alert.ToObject(&as[i])
		}
		return writeJSON(m.Stdout, struct {
			Alerts []alert.Object `json:"alerts"`
		}{objs})
	}
	if len(as) == 0 {
		_, err = fmt.Fprintln(m.Stdout, "no alerts")
		return err
	}
	// The limits, for their unit: an alert of a usd limit is in dollars.
	ls, err := db.Limits(ctx, "")
	if err != nil {
		return err
	}
	byID := make(map[string]*budget.Limit, len(ls))
	for i := range ls {
		byID[ls[i].ID] = &ls[i]
	}
	amount := func(a *budget.Alert, v int64) string {
		if a.Metric != "" {
			return amountText(&budget.Limit{Metric: a.Metric}, v)
		}
		if l := byID[a.LimitID]; l != nil {
			return amountText(l, v)
		}
		return itoa(v) // a deleted limit's, from before alerts kept the metric
	}
	w := newTable(m.Stdout)
	fmt.Fprintln(w, "ID\tLIMIT ID\tOWNER\tSUBJECT\tTHRESHOLD\tUSED/LIMIT\tAT\tRUNS OUT\tDELIVERED")
	for i := range as {
		a := &as[i]
		owner := a.Owner
		switch a.Level {
		case budget.LevelDefault:
			owner = "(default)"
		case budget.LevelTeam, budget.LevelOrg:
			owner = string(a.Level) + ":" + owner
		}
		threshold := strconv.Itoa(a.Threshold) + "%"
		if a.Kind == budget.AlertExhausted {
			threshold = "exhausted"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.LimitID, owner, subjectText(a.Subject),
			threshold, amount(a, a.Used)+"/"+amount(a, a.Max), ts(a.At),
			tsText(a.ExhaustsAt), tsText(a.DeliveredAt))
	}
	return w.Flush()
}

// subjectText is a counter's subject for tables, "-" for none.
func subjectText(s string) string {
	if s == "" {
		return "-"
	}
	return budget.SubjectText(s)
}
