package dashboard

import (
	"strconv"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/jsonview"
)

// How numbers and instants read on the pages: counts with thousands
// separators, micro-dollars as dollars, instants in Config.Location with
// how far they are from now.

// count is n with thousands separators: "1,234,567".
func count(n int64) string {
	s, sign := strconv.FormatInt(n, 10), ""
	if n < 0 {
		s, sign = s[1:], "-"
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return sign + s
}

// dollars is an amount of micro-dollars: to the cent from $1 on
// ("$1,234.57"), exact below ("$0.0042").
func dollars(micros int64) string {
	neg := micros < 0
	if neg {
		micros = -micros
	}
	var s string
	if micros >= budget.MicrosPerUSD {
		cents := (micros + 5_000) / 10_000
		s = "$" + count(cents/100) + "." + strconv.FormatInt(100+cents%100, 10)[1:]
	} else {
		s = "$" + budget.FormatUSD(micros)
	}
	if neg {
		return "-" + s
	}
	return s
}

// amount is v in metric m's unit: dollars for usd, a count otherwise.
func amount(m budget.Metric, v int64) string {
	if m == budget.MetricUSD {
		return dollars(v)
	}
	return count(v)
}

// short is v of metric m as an axis labels it: "950", "1.5k", "12M",
// "$0.25", "$12.50", "$1.2k".
func short(m budget.Metric, v int64) string {
	if m == budget.MetricUSD {
		switch d := float64(v) / budget.MicrosPerUSD; {
		case d < 1000:
			return "$" + strconv.FormatFloat(d, 'f', 2, 64)
		default:
			return "$" + jsonview.Short(d)
		}
	}
	if v < 1000 {
		return strconv.FormatInt(v, 10)
	}
	return jsonview.Short(float64(v))
}

// unit names what metric m counts, for sentences ("tokens", "requests in
// flight").
func unit(m budget.Metric) string {
	switch m {
	case budget.MetricUSD:
		return "dollars"
	case budget.MetricInput:
		return "input tokens"
	case budget.MetricOutput:
		return "output tokens"
	case budget.MetricConcurrent:
		return "requests in flight"
	}
	return string(m)
}

// percent is x of max in whole percent, rounded down ("-" without a max).
func percent(x, max int64) string {
	if max <= 0 {
		return "-"
	}
	return strconv.FormatInt(int64(float64(x)/float64(max)*100), 10) + "%"
}

// clock formats instants in a location.
type clock struct {
	loc *time.Location
	now time.Time
}

// at is t as the pages show instants: "18:00 UTC" on now's day (in the
// location), "2026-03-03 00:00 UTC" on another; with seconds when it has
// some.
func (c clock) at(t time.Time) string {
	t = t.In(c.loc)
	layout := "15:04 MST"
	if t.Second() != 0 {
		layout = "15:04:05 MST"
	}
	if y, m, d := t.Date(); y != c.now.In(c.loc).Year() || m != c.now.In(c.loc).Month() || d != c.now.In(c.loc).Day() {
		layout = "2006-01-02 " + layout
	}
	return t.Format(layout)
}

// full is t with its date, always: "2026-03-02 18:30 UTC".
func (c clock) full(t time.Time) string { return t.In(c.loc).Format("2006-01-02 15:04 MST") }

// rel is how far t is from now: "in 3h20m", "12m ago", "now".
func (c clock) rel(t time.Time) string {
	d := t.Sub(c.now)
	switch {
	case d > 0:
		return "in " + span(d)
	case d < 0:
		return span(-d) + " ago"
	}
	return "now"
}

// span is d in its two largest units, rounded up to the smaller: "40s",
// "20m", "21h20m", "6d13h".
func span(d time.Duration) string {
	if d < time.Minute {
		return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10) + "s"
	}
	m := int64((d + time.Minute - 1) / time.Minute)
	days, hours, mins := m/(24*60), m/60%24, m%60
	it := strconv.FormatInt
	switch {
	case days > 0 && hours > 0:
		return it(days, 10) + "d" + it(hours, 10) + "h"
	case days > 0:
		return it(days, 10) + "d"
	case hours > 0 && mins > 0:
		return it(hours, 10) + "h" + it(mins, 10) + "m"
	case hours > 0:
		return it(hours, 10) + "h"
	}
	return it(mins, 10) + "m"
}

// who names whose limit l is, as the pages say it: "key alice", "team
// eng", "default for key alice", with the end user of a per-user limit.
func who(l *budget.Limit) string {
	s := l.Describe()
	if u := l.SubjectUser(); u != "" {
		s += ", user " + u
	}
	if tag := l.SubjectTag(); tag != "" {
		s += ", tag " + tag
	}
	return s
}

// per says what l counts per what: "tokens per 1h", "dollars, never
// resets", "requests in flight".
func per(l *budget.Limit) string {
	switch {
	case l.Metric == budget.MetricConcurrent:
		return unit(l.Metric)
	case !l.Window.Resets():
		return unit(l.Metric) + ", never resets"
	}
	switch l.Window.Kind {
	case budget.Daily:
		return unit(l.Metric) + " per day"
	case budget.Weekly:
		return unit(l.Metric) + " per week"
	case budget.Monthly:
		return unit(l.Metric) + " per month"
	}
	return unit(l.Metric) + " per " + l.Window.String()
}
