package jsonview

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/tokenbudget/tokenbudget/budget"
)

// ReportColumns are a report's columns after its dimensions.
var ReportColumns = []string{"requests", "input", "output", "reasoning", "cache_read", "cache_write", "tokens", "usd"}

// ReportUSD is a group's cost in dollars with exactly 6 decimals, or ok
// false when the group holds an event no price matched.
func ReportUSD(t *budget.Totals) (string, bool) {
	if t.NoPrice > 0 {
		return "", false
	}
	return fmt.Sprintf("%d.%06d", t.Cost/budget.MicrosPerUSD, t.Cost%budget.MicrosPerUSD), true
}

// ReportCounts are a row's integer columns, in ReportColumns order.
func ReportCounts(t *budget.Totals) []int64 {
	return []int64{t.Requests, t.Input, t.Output, t.Reasoning, t.CacheRead, t.CacheWrite, min(t.Tokens(), budget.MaxTokens)}
}

// WriteReportJSON writes `budget report --format json`'s document:
// {"rows": [...]}, each row's fields in column order: the dimensions (null
// when empty), the counts, usd (a number with 6 decimals, null when
// unknown).
func WriteReportJSON(w io.Writer, by []budget.Dim, rows []budget.ReportRow) error {
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
			var v *string
			if r.Values[j] != "" {
				v = &r.Values[j]
			}
			field(&b, string(d), v)
		}
		for j, n := range ReportCounts(&r.Totals) {
			if j > 0 || len(by) > 0 {
				b.WriteString(", ")
			}
			field(&b, ReportColumns[j], n)
		}
		b.WriteString(", ")
		if usd, ok := ReportUSD(&r.Totals); ok {
			field(&b, "usd", json.RawMessage(usd))
		} else {
			field(&b, "usd", nil)
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

func field(b *bytes.Buffer, name string, v any) {
	k, _ := json.Marshal(name)
	val, _ := json.Marshal(v) // strings, integers, raw numbers and nil always marshal
	b.Write(k)
	b.WriteString(": ")
	b.Write(val)
}

// WriteReportCSV writes `budget report --format csv`'s header and rows.
func WriteReportCSV(w io.Writer, by []budget.Dim, rows []budget.ReportRow) error {
	cw := csv.NewWriter(w)
	head := make([]string, 0, len(by)+len(ReportColumns))
	for _, d := range by {
		head = append(head, string(d))
	}
	if err := cw.Write(append(head, ReportColumns...)); err != nil {
		return err
	}
	for i := range rows {
		r := &rows[i]
		rec := append([]string(nil), r.Values...)
		for _, n := range ReportCounts(&r.Totals) {
			rec = append(rec, strconv.FormatInt(n, 10))
		}
		usd, _ := ReportUSD(&r.Totals)
		if err := WriteCSVRecord(cw, append(rec, usd)); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// CSVCell is s safe to open in a spreadsheet: a cell starting with =, +,
// -, @, a tab or a carriage return would be read as a formula, so it gets
// a leading apostrophe (OWASP's advice for CSV injection). Models and end
// users are chosen by clients, so a CSV report or export must not hand
// them a formula in the operator's spreadsheet; the JSON-lines export,
// which import reads, stays exact.
func CSVCell(s string) string {
	if s == "" {
		return s
	}
	switch s[0] {
	case '=', '+', '-', '@', '\t', '\r':
		return "'" + s
	}
	return s
}

// WriteCSVRecord writes rec through CSVCell.
func WriteCSVRecord(w *csv.Writer, rec []string) error {
	for i, c := range rec {
		rec[i] = CSVCell(c)
	}
	return w.Write(rec)
}
