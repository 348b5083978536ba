package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/jsonview"
)

const exportHelp = `usage: budget export [--db PATH] [--since T] [--until T] [--key K] [--format jsonl|csv]

Writes the usage events of [--since, --until) to stdout, one per line, in
order of instant, key and request id (--key: that key's only). T is RFC3339
or a date (YYYY-MM-DD, a UTC midnight); by default the whole history.

jsonl (the default) writes exactly the JSON lines 'budget import' reads:
request_id, key, provider, model, user, team and org (where the event has
them), input, output, reasoning, cache_read, cache_write, at (RFC3339 with
nanoseconds, UTC) and cost: what the event cost in micro-dollars (an
integer; 1000000 is one dollar), left out where no price matched it, and
tags (an object of tag names to values, where the event has any). An
import keeps the cost as given instead of pricing the event again, and the
team and org it was charged to. csv writes the same fields as columns under
a header (empty where a jsonl line leaves the field out; tags as
name=value,name=value).

Nothing but the events goes to stdout; notes go to stderr: the part of the
range before the prune horizon ('budget prune') is only held as daily
rollups, which 'budget report' sums but export cannot give as events.
Writes nothing to the database.

`

var exportColumns = []string{"request_id", "key", "provider", "model", "user", "team", "org", "input", "output",
	"reasoning", "cache_read", "cache_write", "at", "cost", "tags"}

func (m *Main) runExport(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("export")
	dsn := m.dbFlag(fs)
	since := fs.String("since", "", "start of the range, RFC3339 or YYYY-MM-DD (default: the start of the history)")
	until := fs.String("until", "", "end of the range, exclusive, RFC3339 or YYYY-MM-DD (default: the end of the history)")
	key := fs.String("key", "", "only this key's events")
	format := fs.String("format", "jsonl", "jsonl (what budget import reads) or csv")
	pos, err := m.parseArgs(fs, exportHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("export", pos); err != nil {
		return err
	}
	from, to, err := budget.ParseRange(*since, *until, budget.HistoryEnd, "--since")
	if err != nil {
		return err
	}
	k := strings.TrimSpace(*key)
	if k != "" {
		if err := budget.CheckName("key", k); err != nil {
			return err
		}
	}
	f := strings.TrimSpace(*format)
	if f != "jsonl" && f != "csv" {
		return budget.Invalid("format", *format, "want jsonl or csv")
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)

	bw := bufio.NewWriterSize(m.Stdout, 64<<10)
	var write func(*budget.Usage) error
	flush := func() error { return nil } // the csv writer's buffer, when there is one
	if f == "csv" {
		cw := csv.NewWriter(bw)
		if err := cw.Write(exportColumns); err != nil {
			return err
		}
		write = func(u *budget.Usage) error {
			cost := ""
			if !u.NoPrice {
				cost = itoa(u.Cost)
			}
			jsonview.WriteCSVRecord(cw, []string{u.RequestID, u.Key, u.Provider, u.Model, u.User, u.Team, u.Org, itoa(u.Input), itoa(u.Output),
				itoa(u.Reasoning), itoa(u.CacheRead), itoa(u.CacheWrite), u.At.UTC().Format(time.RFC3339Nano), cost, string(u.Tags)})
			return cw.Error()
		}
		flush = func() error { cw.Flush(); return cw.Error() }
	} else {
		enc := json.NewEncoder(bw)
		enc.SetEscapeHTML(false)
		write = func(u *budget.Usage) error { return enc.Encode(jsonview.EventOf(u)) }
	}
	res, err := db.Export(ctx, from, to, k, func(u budget.Usage) error { return write(&u) })
	if err == nil {
		err = flush()
	}
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		return err
	}
	if !res.RolledUpFrom.IsZero() {
		start := ts(res.RolledUpFrom)
		if res.RolledUpFrom.Equal(budget.HistoryStart) {
			start = "the start of the history"
		}
		fmt.Fprintf(m.Stderr, "budget: export: note: from %s to %s the history was pruned ('budget prune'): only its daily rollups remain, which 'budget report' sums; those days are not exported as events\n",
			start, ts(res.RolledUpTo))
	}
	return nil
}
