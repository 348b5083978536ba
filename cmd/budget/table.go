package main

import (
	"io"
	"text/tabwriter"

	"github.com/tokenbudget/tokenbudget/budget"
)

// table is the aligned text every command prints for people. What is
// written to it shows format characters escaped (budget.Visible): models
// and end users are the clients' names, and a bidirectional override in
// one would make a row read as another. --json output stays exact.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer) *table { return &table{tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)} }

// Write takes whole formatted lines or cells (one fmt call each), so a
// rune is never split across two writes.
func (t *table) Write(p []byte) (int, error) {
	if v := budget.Visible(string(p)); len(v) != len(p) {
		if _, err := io.WriteString(t.tw, v); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return t.tw.Write(p)
}

func (t *table) Flush() error { return t.tw.Flush() }
