package dashboard

import (
	"html"
	"html/template"
	"strconv"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// BarUnits is the width of a limit's bar in SVG user units (its viewBox):
// each part's width is its amount in thousandths of the limit.
const BarUnits = 1000

// bar is the geometry of one limit's bar: used, reserved and remaining side
// by side, in BarUnits, with the forecast marker.
type bar struct {
	Used, Reserved, Remaining string // widths, formatted for the SVG
	ReservedX, RemainingX     string // where reserved and remaining start
	// Marker is the forecast marker's x ("" for none): where the window
	// ends at the current pace, at the bar's end when that is past the
	// limit.
	Marker string
	// Red says the limit runs out before its reset at this pace (or is
	// already out); Over that usage is past the limit.
	Red, Over bool
}

// barOf is the bar of used and reserved out of max (> 0), with forecast f
// (nil for none). Used is clamped to max, reserved to what max leaves.
func barOf(used, reserved, limit int64, f *budget.Forecast) bar {
	u, r := barParts(used, reserved, limit)
	b := bar{Used: units(u), Reserved: units(r), Remaining: units(BarUnits - u - r),
		ReservedX: units(u), RemainingX: units(u + r), Over: used > limit}
	if f != nil {
		b.Red = !f.ExhaustsAt.IsZero()
		if f.ForecastUsed >= 0 && limit > 0 {
			b.Marker = units(min(float64(f.ForecastUsed)/float64(limit), 1) * BarUnits)
		}
	}
	return b
}

// barParts are the widths of used and reserved in BarUnits.
func barParts(used, reserved, limit int64) (u, r float64) {
	if limit <= 0 {
		return 0, 0
	}
	ua := min(max(used, 0), limit)
	ra := min(max(reserved, 0), limit-ua)
	return float64(ua) / float64(limit) * BarUnits, float64(ra) / float64(limit) * BarUnits
}

// units formats a width with at most two decimals ("412.5").
func units(x float64) string {
	return strconv.FormatFloat(float64(int64(x*100+0.5))/100, 'f', -1, 64)
}

// limitRow is one limit on a page: its identity, its numbers as text, its
// bar, its reset and its forecast.
type limitRow struct {
	ID, Subject string
	Level       string
	Who         string // "key alice", "default for key bob, user carol"
	Key         string // the key whose page to link ("" for none)
	Team, Org   string // the team or org to filter by ("" for none)
	What        string // "tokens per 1h · model=gpt-4o"
	Disabled    bool

	Used, Reserved, Max                     int64 // raw, for data attributes
	UsedText, ReservedText, LeftText, Limit string
	Percent                                 string
	Util                                    float64 // (used + reserved) / max, the sort order
	Bar                                     bar
	Label                                   string        // the bar's text alternative
	SVG                                     template.HTML // the bar drawn (barSVG)

	Reset    string // "resets 2026-03-02 19:00 UTC (in 40m)", "never resets"
	Forecast string // "at this pace: 8,000 by the reset (160%)", ...
}

// rowOf is the row of status st with its forecast f (nil for none).
func rowOf(st *budget.Status, f *budget.Forecast, c clock) limitRow {
	l := &st.Limit
	m := l.Metric
	row := limitRow{ID: l.ID, Subject: l.Subject, Level: string(l.Level()), Who: who(l), Disabled: !l.Enabled,
		Used: st.Used, Reserved: st.Reserved, Max: st.Max,
		UsedText: amount(m, st.Used), ReservedText: amount(m, st.Reserved), Limit: amount(m, st.Max),
		LeftText: amount(m, max(st.Max-st.Used-st.Reserved, 0)), Percent: percent(st.Used+st.Reserved, st.Max)}
	switch l.Level() {
	case budget.LevelKey:
		row.Key = l.Key
	case budget.LevelTeam:
		row.Team = l.Team
	case budget.LevelOrg:
		row.Org = l.Org
	case budget.LevelDefault:
		row.Key = l.SubjectKey()
	}
	row.What = per(l)
	if l.Scope != budget.ScopeGlobal {
		row.What += " · " + l.ScopeString()
	}
	if st.Max > 0 {
		row.Util = float64(st.Used+st.Reserved) / float64(st.Max)
	}
	row.Bar = barOf(st.Used, st.Reserved, st.Max, f)
	row.Label = "used " + row.UsedText + ", reserved " + row.ReservedText + ", left " + row.LeftText + " of " + row.Limit
	switch {
	case m == budget.MetricConcurrent:
		row.Reset = "no window: counts requests in flight"
	case !l.Window.Resets() || st.ResetAt.IsZero() || forever(st.ResetAt):
		row.Reset = "never resets"
	default:
		row.Reset = "resets " + c.at(st.ResetAt) + " (" + c.rel(st.ResetAt) + ")"
	}
	row.Forecast = forecastText(st, f, c)
	if row.Forecast != "" {
		row.Label += "; " + row.Forecast
	}
	row.SVG = barSVG(&row)
	return row
}

// barSVG draws a row's bar: an SVG BarUnits wide, stretched to its box,
// with the row's numbers in data attributes and its label as the text
// alternative. It is built here rather than in the template because the
// overview draws a thousand of them: every value is a number but the
// label, which is escaped.
func barSVG(r *limitRow) template.HTML {
	var b strings.Builder
	b.Grow(640)
	itoa := func(v int64) string { return strconv.FormatInt(v, 10) }
	b.WriteString(`<svg class="bar" viewBox="0 0 1000 24" preserveAspectRatio="none" role="img" aria-label="`)
	b.WriteString(html.EscapeString(r.Label))
	b.WriteString(`" data-used="` + itoa(r.Used) + `" data-reserved="` + itoa(r.Reserved) + `" data-max="` + itoa(r.Max) + `">` + "\n")
	used := "used"
	if r.Bar.Over {
		used = "used over"
	}
	b.WriteString(`<rect class="` + used + `" x="0" y="0" width="` + r.Bar.Used + `" height="24"></rect>` + "\n")
	b.WriteString(`<rect class="reserved" x="` + r.Bar.ReservedX + `" y="0" width="` + r.Bar.Reserved + `" height="24"></rect>` + "\n")
	b.WriteString(`<rect class="remaining" x="` + r.Bar.RemainingX + `" y="0" width="` + r.Bar.Remaining + `" height="24"></rect>`)
	if r.Bar.Marker != "" {
		marker := "marker"
		if r.Bar.Red {
			marker = "marker red"
		}
		b.WriteString("\n" + `<line class="` + marker + `" x1="` + r.Bar.Marker + `" x2="` + r.Bar.Marker + `" y1="-5" y2="29"></line>`)
	}
	b.WriteString("\n</svg>")
	return template.HTML(b.String())
}

// forecastText says where the window is heading ("" without a forecast).
func forecastText(st *budget.Status, f *budget.Forecast, c clock) string {
	if f == nil {
		return ""
	}
	m := st.Limit.Metric
	resets := st.Limit.Window.Resets() && !st.ResetAt.IsZero() && !forever(st.ResetAt)
	var s string
	switch {
	case st.Used+st.Reserved >= st.Max && resets:
		return "out: nothing left until the reset"
	case st.Used+st.Reserved >= st.Max:
		return "out: it never resets, only a raise helps"
	case f.Rate == 0:
		return "no usage lately"
	case f.ForecastUsed >= 0:
		s = "at this pace " + amount(m, f.ForecastUsed) + " (" + percent(f.ForecastUsed, st.Max) + ") by the reset"
	default:
		s = "at this pace " + amount(m, int64(f.Rate*3600+0.5)) + " an hour"
	}
	if !f.ExhaustsAt.IsZero() {
		s += ", out at " + c.at(f.ExhaustsAt) + " (" + c.rel(f.ExhaustsAt) + ")"
		if resets {
			s += ", before the reset"
		}
	}
	return s
}

// forever reports whether t is the domain's "never" instant.
func forever(t time.Time) bool { return !t.Before(budget.Forever) }
