package main

import (
	"context"
	"fmt"
	"io"

	"github.com/tokenbudget/tokenbudget/budget"
)

const checkHelp = `usage: budget check --key K [--provider P] [--model M] [--user U] [--tag NAME=VALUE]... [--tokens N]
	[--at T] [--json]

Asks whether a request may run at --at (default now) without consuming
anything: every applicable enabled limit (the key's, its team's, its org's
and the defaults counted for it), the most restrictive breach and whether
the provider is parked. --tokens is one unsplit estimate that counts fully
against every token metric. --user is the end user the request is for:
user limits apply by it; each --tag (project=atlas) is what it is for: tag
limits apply by them. Exit 3 when refused. With --json prints
{"allowed", "breach", "parked", "limits"}; a breach's level and owner say
whose limit refused.

`

func (m *Main) runCheck(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("check")
	dsn := m.dbFlag(fs)
	var req budget.Request
	fs.StringVar(&req.Key, "key", "", "API key (required)")
	fs.StringVar(&req.Provider, "provider", "", "provider of the request")
	fs.StringVar(&req.Model, "model", "", "model of the request")
	fs.StringVar(&req.User, "user", "", "end user the request is for")
	tags := tagFlag(fs)
	fs.Int64Var(&req.Estimate.Tokens, "tokens", 0, "estimated tokens of the request")
	at := m.atFlag(fs)
	asJSON := fs.Bool("json", false, `print {"allowed", "breach", "parked", "limits"}`)
	pos, err := m.parseArgs(fs, checkHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("check", pos); err != nil {
		return err
	}
	now, err := at()
	if err != nil {
		return err
	}
	if req.Tags, err = tags(); err != nil {
		return err
	}
	if err := req.Validate(); err != nil {
		return err
	}

	db, err := m.openDB(ctx, *dsn, dbOptions{now: fixedClock(now)})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	d, err := db.CheckAt(ctx, req, now)
	if err != nil {
		return err
	}
	if *asJSON {
		var fs []*budget.Forecast
		if fs, err = decisionForecasts(ctx, db.Tracker, &d, now); err != nil {
			return err
		}
		err = writeJSON(m.Stdout, decisionObj(&d, fs, now))
	} else {
		err = writeDecision(m.Stdout, &d, req.Estimate)
	}
	if err == nil && !d.Allowed {
		err = errRefused
	}
	return err
}

// writeDecision prints a decision for humans: the verdict, why, and the
// applicable limits.
func writeDecision(w0 io.Writer, d *budget.Decision, est budget.Estimate) error {
	w := newTable(w0)
	switch {
	case d.Allowed:
		fmt.Fprintf(w, "allowed (%d applicable limits)\n", len(d.Limits))
	default:
		fmt.Fprintln(w, "refused")
	}
	if b := d.Breach; b != nil {
		l := &b.Limit
		retry := "retryable"
		if !b.Retryable {
			retry = "not retryable: the estimate alone exceeds the limit"
		}
		e, op := est.Amount(l.Metric), ">"
		if e == 0 {
			op = ">="
		}
		estText := amountText(l, e)
		if l.Metric == budget.MetricUSD {
			estText = "the estimate priced" // the CLI's estimate is tokens; the tracker priced it
		}
		fmt.Fprintf(w, "  limit %s (%s %s %s %s): used %s + reserved %s + %s %s limit %s; retry after %ds (%s)\n",
			l.ID, ownerText(l), scopeString(l, identity), l.Metric, windowText(l), amountText(l, b.Used), amountText(l, b.Reserved),
			estText, op, limitText(l, b.Max), b.RetryAfterSeconds(), retry)
	}
	if u := d.Unpriced; u != nil {
		fmt.Fprintf(w, "  model %q of provider %q has no price and a dollar limit applies: set one with 'budget price set'\n", u.Model, u.Provider)
	}
	if p := d.Parked; p != nil {
		fmt.Fprintf(w, "  provider %s is parked (%s) until %s; retry after %ds\n",
			p.Provider, p.Kind, tsText(p.ResumeAt), p.RetryAfterSeconds())
	}
	if len(d.Limits) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, statusHeader)
		for i := range d.Limits {
			fmt.Fprintln(w, statusLine(&d.Limits[i]))
		}
	}
	return w.Flush()
}
