package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/jsonview"
)

const reportHelp = `usage: budget report [--db PATH] [--since T] [--until T] [--by DIMS] [--key K]
	[--format table|csv|json]

Sums the usage of [--since, --until) by the dimensions of --by, a
comma-separated list of key, team, org, user, provider, model, day, week,
month and tag:NAME (the value of tag NAME, as requests carry it: --by
tag:project groups by project) (none: one row of totals). T is RFC3339 or a date (YYYY-MM-DD,
a UTC midnight); --since defaults to the start of the history, --until to
now. --key narrows it to one key's events. day, week (the ISO week's
Monday) and month are UTC: 2026-03-02, 2026-03-02, 2026-03.

Columns: the --by dimensions as named, then requests, input, output,
reasoning, cache_read, cache_write, tokens (billable: input + output +
reasoning) and usd (dollars, 6 decimals). usd is empty in CSV, null in
JSON and "-" in the table for a group holding an event that no price
matched: its cost is not known. A dimension an event has no value for (no
team, no end user, no such tag) is empty in CSV, null in JSON, "-" in the table. Rows are
sorted by the --by columns. CSV prints the header and the rows, nothing
else; JSON prints {"rows": [{...}]}, one object per row with the CSV's
columns as fields.

Whole UTC days are summed from the daily rollups, the partial days at either
end from the events. Before the prune horizon ('budget prune') only the
rollups remain: there --since and --until must be UTC midnights (exit 2).
Writes nothing.

`

func (m *Main) runReport(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("report")
	dsn := m.dbFlag(fs)
	since := fs.String("since", "", "start of the range, RFC3339 or YYYY-MM-DD (default: the start of the history)")
	until := fs.String("until", "", "end of the range, exclusive, RFC3339 or YYYY-MM-DD (default: now)")
	by := fs.String("by", "", "dimensions to group by: key, team, org, user, provider, model, day, week, month, tag:NAME")
	key := fs.String("key", "", "only this key's usage")
	format := fs.String("format", "table", "table, csv or json")
	pos, err := m.parseArgs(fs, reportHelp, args)
	if err != nil {
		return err
	}
	if err := noArgs("report", pos); err != nil {
		return err
	}
	q := budget.ReportQuery{Key: strings.TrimSpace(*key)}
	if q.Since, q.Until, err = budget.ParseRange(*since, *until, m.Now(), "--since"); err != nil {
		return err
	}
	if q.By, err = budget.ParseDims(*by); err != nil {
		return err
	}
	if q.Key != "" {
		if err := budget.CheckName("key", q.Key); err != nil {
			return err
		}
	}
	f := strings.TrimSpace(*format)
	switch f {
	case "table", "csv", "json":
	default:
		return budget.Invalid("format", *format, "want table, csv or json")
	}
	db, err := m.openDB(ctx, *dsn, dbOptions{})
	if err != nil {
		return err
	}
	defer closeDB(ctx, db, &err)
	rows, err := db.Report(ctx, q)
	if err != nil {
		return err
	}
	switch f {
	case "csv":
		return jsonview.WriteReportCSV(m.Stdout, q.By, rows)
	case "json":
		return jsonview.WriteReportJSON(m.Stdout, q.By, rows)
	}
	return writeReportTable(m.Stdout, q, rows)
}

func dimNames(by []budget.Dim) []string {
	out := make([]string, len(by))
	for i, d := range by {
		out[i] = string(d)
	}
	return out
}

func writeReportTable(w io.Writer, q budget.ReportQuery, rows []budget.ReportRow) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintf(w, "no usage from %s to %s\n", ts(q.Since), ts(q.Until))
		return err
	}
	tw := newTable(w)
	head := append(dimNames(q.By), "REQUESTS", "INPUT", "OUTPUT", "REASONING", "CACHE READ", "CACHE WRITE", "TOKENS", "USD")
	fmt.Fprintln(tw, strings.ToUpper(strings.Join(head, "\t")))
	for i := range rows {
		r := &rows[i]
		var cells []string
		for _, v := range r.Values {
			cells = append(cells, cmp.Or(v, "-"))
		}
		for _, n := range jsonview.ReportCounts(&r.Totals) {
			cells = append(cells, itoa(n))
		}
		usd, ok := jsonview.ReportUSD(&r.Totals)
		if !ok {
			usd = "-"
		}
		fmt.Fprintln(tw, strings.Join(append(cells, usd), "\t"))
	}
	return tw.Flush()
}
