package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

const reportHelp = `usage: budget report [--db PATH] [--since T] [--until T] [--by DIMS] [--key K]
	[--format table|csv|json]

Sums the usage of [--since, --until) by the dimensions of --by, a
comma-separated list of key, team, org, user, provider, model, day, week
and month (none: one row of totals). T is RFC3339 or a date (YYYY-MM-DD,
a UTC midnight); --since defaults to the start of the history, --until to
now. --key narrows it to one key's events. day, week (the ISO week's
Monday) and month are UTC: 2026-03-02, 2026-03-02, 2026-03.

Columns: the --by dimensions as named, then requests, input, output,
reasoning, cache_read, cache_write, tokens (billable: input + output +
reasoning) and usd (dollars, 6 decimals). usd is empty in CSV, null in
JSON and "-" in the table for a group holding an event that no price
matched: its cost is not known. A dimension an event has no value for (no
team, no end user) is empty in CSV, null in JSON, "-" in the table. Rows are
sorted by the --by columns. CSV prints the header and the rows, nothing
else; JSON prints {"rows": [{...}]}, one object per row with the CSV's
columns as fields.

Whole UTC days are summed from the daily rollups, the partial days at either
end from the events. Before the prune horizon ('budget prune') only the
rollups remain: there --since and --until must be UTC midnights (exit 2).
Writes nothing.

`

// historyStart is the default --since: the earliest instant the history
// holds (contract section 1 bounds instants to 1678..2261).
var historyStart = time.Date(1678, 1, 1, 0, 0, 0, 0, time.UTC)

// historyEnd is export's default --until: past every instant the history
// can hold but the last nanosecond of 2261.
var historyEnd = time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC).Add(-time.Nanosecond)

// reportColumns are the columns after the --by dimensions.
var reportColumns = []string{"requests", "input", "output", "reasoning", "cache_read", "cache_write", "tokens", "usd"}

func (m *Main) runReport(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("report")
	dsn := m.dbFlag(fs)
	since := fs.String("since", "", "start of the range, RFC3339 or YYYY-MM-DD (default: the start of the history)")
	until := fs.String("until", "", "end of the range, exclusive, RFC3339 or YYYY-MM-DD (default: now)")
	by := fs.String("by", "", "dimensions to group by: key, team, org, user, provider, model, day, week, month")
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
	if q.Since, q.Until, err = m.parseRange(*since, *until, m.Now()); err != nil {
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
		return writeReportCSV(m.Stdout, q.By, rows)
	case "json":
		return writeReportJSON(m.Stdout, q.By, rows)
	}
	return writeReportTable(m.Stdout, q, rows)
}

// parseRange parses --since and --until; empty ones take the start of the
// history and now.
func (m *Main) parseRange(since, until string, now time.Time) (s, u time.Time, err error) {
	s, u = historyStart, now
	if strings.TrimSpace(since) != "" {
		if s, err = parseInstant("since", since); err != nil {
			return s, u, err
		}
	}
	if strings.TrimSpace(until) != "" {
		if u, err = parseInstant("until", until); err != nil {
			return s, u, err
		}
	}
	if !s.Before(u) {
		return s, u, budget.Invalid("until", u.UTC().Format(time.RFC3339Nano), "must be after --since "+s.UTC().Format(time.RFC3339Nano))
	}
	return s, u, nil
}

// parseInstant parses an RFC3339 instant or a date (YYYY-MM-DD), which is
// that day's UTC midnight.
func parseInstant(field, s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, budget.CheckInstant(field, t)
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, budget.Invalid(field, s, "want an RFC3339 time such as 2026-03-02T09:00:00Z, or a date such as 2026-03-02 (UTC)")
	}
	return t, budget.CheckInstant(field, t)
}

// usdText is a cost in dollars with exactly 6 decimals, or ok false when
// the totals hold an event no price matched (its cost is unknown).
func usdText(t *budget.Totals) (string, bool) {
	if t.NoPrice > 0 {
		return "", false
	}
	return fmt.Sprintf("%d.%06d", t.Cost/budget.MicrosPerUSD, t.Cost%budget.MicrosPerUSD), true
}

// reportCounts are a row's integer columns, in reportColumns order.
func reportCounts(t *budget.Totals) []int64 {
	return []int64{t.Requests, t.Input, t.Output, t.Reasoning, t.CacheRead, t.CacheWrite, min(t.Tokens(), budget.MaxTokens)}
}

func dimNames(by []budget.Dim) []string {
	out := make([]string, len(by))
	for i, d := range by {
		out[i] = string(d)
	}
	return out
}

func writeReportCSV(w io.Writer, by []budget.Dim, rows []budget.ReportRow) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(append(dimNames(by), reportColumns...)); err != nil {
		return err
	}
	for i := range rows {
		r := &rows[i]
		rec := append([]string(nil), r.Values...)
		for _, n := range reportCounts(&r.Totals) {
			rec = append(rec, itoa(n))
		}
		usd, _ := usdText(&r.Totals)
		if err := writeCSVRecord(cw, append(rec, usd)); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// writeReportJSON writes {"rows": [...]}, each row's fields in column
// order: the dimensions (null when empty), the counts, usd (a number with 6
// decimals, null when unknown).
func writeReportJSON(w io.Writer, by []budget.Dim, rows []budget.ReportRow) error {
	var b bytes.Buffer
	b.WriteString("{\n  \"rows\": [")
	for i := range rows {
		r := &rows[i]
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n    {")
		for j, d := range by {
			if j > 0 {
				b.WriteString(", ")
			}
			writeJSONField(&b, string(d), nullIfEmpty(r.Values[j]))
		}
		for j, n := range reportCounts(&r.Totals) {
			if j > 0 || len(by) > 0 {
				b.WriteString(", ")
			}
			writeJSONField(&b, reportColumns[j], n)
		}
		b.WriteString(", ")
		if usd, ok := usdText(&r.Totals); ok {
			writeJSONField(&b, "usd", json.RawMessage(usd))
		} else {
			writeJSONField(&b, "usd", nil)
		}
		b.WriteByte('}')
	}
	if len(rows) > 0 {
		b.WriteString("\n  ")
	}
	b.WriteString("]\n}\n")
	_, err := w.Write(b.Bytes())
	return err
}

func writeJSONField(b *bytes.Buffer, name string, v any) {
	k, _ := json.Marshal(name)
	val, _ := json.Marshal(v) // strings, integers, raw numbers and nil always marshal
	b.Write(k)
	b.WriteString(": ")
	b.Write(val)
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
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
		for _, n := range reportCounts(&r.Totals) {
			cells = append(cells, itoa(n))
		}
		usd, ok := usdText(&r.Totals)
		if !ok {
			usd = "-"
		}
		fmt.Fprintln(tw, strings.Join(append(cells, usd), "\t"))
	}
	return tw.Flush()
}
