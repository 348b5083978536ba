package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/jsonview"
)

// The compact inspect report: two lines per limit that fit in reportWidth
// columns (runes) when keys, scope values and ids have at most nameWidth
// runes. Longer names are cut by cut.
const (
	reportWidth = 100
	nameWidth   = 20 // id, key and scope value; longer ones end in "..."
	barWidth    = 20 // cells in a bar

	barUsed      = '█'
	barReserved  = '▒'
	barRemaining = '·'
)

// barLegend follows the limits of the compact report.
const barLegend = "bar: █ used, ▒ reserved, · remaining"

// cut shortens s to at most n runes, ending in "..." when it had more.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	if n <= 3 {
		return strings.Repeat(".", max(n, 0))
	}
	return string([]rune(s)[:n-3]) + "..."
}

// pad right-pads s with spaces to n runes.
func pad(s string, n int) string {
	if k := utf8.RuneCountInString(s); k < n {
		return s + strings.Repeat(" ", n-k)
	}
	return s
}

// barCells splits width cells into used and reserved ones (the rest are
// remaining) for used and reserved out of max (> 0). Amounts are clamped to
// max and rounded to the nearest cell, except that a non-zero amount takes
// at least one cell, a limit that is not full keeps at least one remaining
// cell, and a full one fills the bar.
func barCells(used, reserved, max int64, width int) (u, r int) {
	if max <= 0 || width < 3 {
		return 0, 0
	}
	usedAmt := min(used, max)
	total := usedAmt + min(reserved, max-usedAmt) // used + reserved, at most max
	u, t := cells(usedAmt, max, width), cells(total, max, width)
	if t == u && total > usedAmt { // reserved rounds to nothing: give it a cell
		if t < width-1 {
			t++
		} else {
			u--
		}
	}
	return u, t - u
}

// cells is x of max (0 <= x <= max) in width cells: 0 only for 0, width
// only for max.
func cells(x, max int64, width int) int {
	switch {
	case x <= 0:
		return 0
	case x >= max:
		return width
	}
	c := int(math.Round(float64(x) / float64(max) * float64(width)))
	return min(max1(c), width-1)
}

func max1(c int) int {
	if c < 1 {
		return 1
	}
	return c
}

// barText is the bar of a status: used, reserved, then remaining cells.
func barText(s *budget.Status) string {
	u, r := barCells(s.Used, s.Reserved, s.Max, barWidth)
	return strings.Repeat(string(barUsed), u) + strings.Repeat(string(barReserved), r) +
		strings.Repeat(string(barRemaining), barWidth-u-r)
}

// percentText is used of max in whole percent, rounded down; "-" without a max.
func percentText(used, max int64) string {
	if max <= 0 {
		return "-"
	}
	return fmt.Sprintf("%d%%", int64(float64(used)/float64(max)*100))
}

// untilText is the time from now to t in whole minutes, rounded up, shown
// in its two largest units ("20m", "21h20m", "6d13h"); "-" for the zero
// time.
func untilText(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := t.Sub(now)
	if d <= 0 {
		return "now"
	}
	m := int64((d + time.Minute - 1) / time.Minute)
	days, hours, mins := m/(24*60), m/60%24, m%60
	switch {
	case days > 0 && hours > 0:
		return fmt.Sprintf("%dd%dh", days, hours)
	case days > 0:
		return fmt.Sprintf("%dd", days)
	case hours > 0 && mins > 0:
		return fmt.Sprintf("%dh%dm", hours, mins)
	case hours > 0:
		return fmt.Sprintf("%dh", hours)
	}
	return fmt.Sprintf("%dm", mins)
}

// runsOutText is when a limit runs out at its current pace, for the
// compact report: "in 3h20m", "now", "-" when it does not before its
// reset (or has no forecast), "disabled" for a limit that is not enforced
// and so never runs out.
func runsOutText(l *budget.Limit, f *budget.Forecast, at time.Time) string {
	switch {
	case !l.Enabled:
		return "disabled"
	case f == nil || f.ExhaustsAt.IsZero():
		return "-"
	case !f.ExhaustsAt.After(at):
		return "now"
	}
	return "in " + untilText(at, f.ExhaustsAt)
}

// windowCut is windowText cut to n runes. A calendar window that does not
// fit loses its zone ("daily 09:00"), or keeps what fits of it and "...".
func windowCut(l *budget.Limit, n int) string {
	s := windowText(l)
	if utf8.RuneCountInString(s) <= n || !l.Window.Calendar() {
		return cut(s, n)
	}
	base := l.Window.String() + " " + l.Window.ResetTimeString()
	if utf8.RuneCountInString(base)+len(" x...") <= n {
		return cut(s, n)
	}
	return cut(base, n)
}

// scopeText is scopeString with names cut to nameWidth runes.
func scopeText(l *budget.Limit) string {
	return scopeString(l, func(s string) string { return cut(s, nameWidth) })
}

// writeBars prints the limits of r, two lines each, in reportWidth columns:
//
//	ID  OWNER  SCOPE  METRIC  WINDOW
//	  BAR  USED/LIMIT  RESERVED  USED%  RUNS OUT  RESETS
//
// Columns are as wide as their widest cell; WINDOW is cut to what is left
// of the width.
func writeBars(w io.Writer, r *budget.Report) {
	head := [2][]string{
		{"ID", "OWNER", "SCOPE", "METRIC", "WINDOW"},
		{"BAR", "USED/LIMIT", "RESERVED", "USED%", "RUNS OUT", "RESETS"},
	}
	rows := make([][2][]string, len(r.Limits))
	for i := range r.Limits {
		s := &r.Limits[i]
		l := &s.Limit
		reset := resetText(s.ResetAt)
		if !s.ResetAt.IsZero() && !s.ResetAt.Equal(budget.Forever) {
			reset += " (in " + untilText(r.At, s.ResetAt) + ")"
		}
		var f *budget.Forecast
		if i < len(r.Forecasts) {
			f = r.Forecasts[i]
		}
		second := []string{barText(s), amountText(l, s.Used) + "/" + amountText(l, s.Max),
			amountText(l, s.Reserved), percentText(s.Used, s.Max), runsOutText(l, f, r.At), reset}
		rows[i] = [2][]string{
			{cut(l.ID, nameWidth), cut(ownerText(l), nameWidth), scopeText(l), string(l.Metric), windowText(l)},
			second,
		}
	}
	var widths [2][]int
	measure := func() {
		for j := range head {
			widths[j] = make([]int, len(head[j]))
			for _, row := range append([][2][]string{head}, rows...) {
				for k := range widths[j] {
					widths[j][k] = max(widths[j][k], utf8.RuneCountInString(row[j][k]))
				}
			}
		}
	}
	measure()
	// Amounts too wide for the second line (large limits, dollars beside
	// tokens) are shown short: 9.5M/10M.
	if second := 2 + 2*(len(widths[1])-1) + sum(widths[1]); second > reportWidth {
		for i := range r.Limits {
			s, l := &r.Limits[i], &r.Limits[i].Limit
			rows[i][1][1] = shortAmount(l, s.Used) + "/" + shortAmount(l, s.Max)
			rows[i][1][2] = shortAmount(l, s.Reserved)
		}
		measure()
	}
	// Still too wide (a limit far over, a forecast weeks out): the
	// resets lose their countdown.
	if second := 2 + 2*(len(widths[1])-1) + sum(widths[1]); second > reportWidth {
		for i := range rows {
			rows[i][1][5] = resetText(r.Limits[i].ResetAt)
		}
		measure()
	}
	// WINDOW, the last cell of the first line, gets what the others leave.
	last := len(widths[0]) - 1
	room := reportWidth // at least 13: the other cells are at most 20+20+29+10 runes (scopeString)
	for k := 0; k < last; k++ {
		room -= widths[0][k] + 2
	}
	line := func(indent string, widths []int, texts []string) string {
		var b strings.Builder
		b.WriteString(indent)
		for k, c := range texts {
			if k > 0 {
				b.WriteString("  ")
			}
			if k < len(widths) && k < len(texts)-1 {
				b.WriteString(pad(c, widths[k]))
			} else {
				b.WriteString(c)
			}
		}
		return strings.TrimRight(b.String(), " ")
	}
	printRow := func(row [2][]string, l *budget.Limit) {
		first := append([]string(nil), row[0]...)
		if l != nil {
			first[last] = windowCut(l, room)
		}
		fmt.Fprintln(w, line("", widths[0], first))
		fmt.Fprintln(w, line("  ", widths[1], row[1]))
	}
	printRow(head, nil)
	for i, row := range rows {
		printRow(row, &r.Limits[i].Limit)
	}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// shortAmount is amountText shortened: an amount of 10,000 or more in
// thousands, millions... with one decimal ("12.3k", "9.5M"), dollars from
// $1,000 likewise ("$2.5k"). Dollars below that keep amountText's
// precision, as every other inspect view shows them: rounded to cents, a
// small nonzero amount would read $0.00.
func shortAmount(l *budget.Limit, v int64) string {
	if l.Metric == budget.MetricUSD {
		d := float64(v) / 1e6
		if d < 1000 {
			return amountText(l, v)
		}
		return "$" + jsonview.Short(d)
	}
	if v < 10000 {
		return strconv.FormatInt(v, 10)
	}
	return jsonview.Short(float64(v))
}

// writeCompactReport prints a report in reportWidth columns: the limits as
// bars (writeBars), then the rollovers and parked providers with ids and
// names cut to nameWidth.
func writeCompactReport(m *Main, r *budget.Report) error {
	fmt.Fprintf(m.Stdout, "at %s\n\n", ts(r.At))
	if len(r.Limits) == 0 {
		fmt.Fprintln(m.Stdout, "no limits")
	} else {
		writeBars(m.Stdout, r)
		fmt.Fprintln(m.Stdout, barLegend)
	}
	w := newTable(m.Stdout)
	fmt.Fprintln(w)
	writeRollovers(w, r.Rollovers, func(id string) string { return cut(id, nameWidth) })
	if len(r.Providers) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "PROVIDER\tKIND\tRESUME AT\tPROBE FAILURES\tREFUSING")
		for i := range r.Providers {
			p := &r.Providers[i]
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", cut(p.Provider, nameWidth), p.Kind, tsText(p.ResumeAt),
				p.ProbeFailures, yesNo(p.Refusing(r.At)))
		}
	}
	return w.Flush()
}
