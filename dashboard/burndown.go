package dashboard

import (
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// burnChart is the burn-down chart of a limit window: its usage summed
// over the window so far, the limit line, and the forecast from now to
// the reset at the current pace.
type burnChart struct {
	W, H       int
	XAxis      line
	YAxis      line
	Grid       []line
	Used       string // the cumulative usage: polyline points
	Reserved   *line  // at now, from used to used + reserved
	Limit      line
	LimitLabel tick
	Forecast   *line
	Red        bool // the forecast runs out before the reset
	Exhaust    *tick
	Now        line
	NowLabel   tick
	XTicks     []tick
	YTicks     []tick
	Title      string
	Desc       string // the text alternative: what the chart shows, in words
}

// seriesRow is a bucket of a burn-down's table.
type seriesRow struct {
	From, To      string
	Amount, Total string
}

// chartEnd is where a burn-down chart's time axis ends: the reset, or for
// a window that never resets, a third of the elapsed time past now.
func chartEnd(st *budget.Status, now time.Time) time.Time {
	if st.Limit.Window.Resets() && !forever(st.ResetAt) && !st.ResetAt.IsZero() {
		return st.ResetAt
	}
	return now.Add(max(now.Sub(st.WindowStart)/3, time.Minute))
}

// burnDown draws st's window at now from usage, the amounts of the buckets
// between edges, with forecast f (nil for none), and lists the buckets
// that have usage.
func burnDown(st *budget.Status, f *budget.Forecast, edges []time.Time, usage []int64, now time.Time, c clock) (burnChart, []seriesRow) {
	l := &st.Limit
	m := l.Metric
	fmtAmount := func(v int64) string { return short(m, v) }
	end := chartEnd(st, now)
	held := st.Used + st.Reserved
	projected := held
	if f != nil {
		if f.ForecastUsed >= 0 {
			projected = f.ForecastUsed
		} else {
			projected = held + int64(f.Rate*end.Sub(now).Seconds())
		}
	}
	var total int64
	for _, u := range usage {
		total += u
	}
	top := float64(max(st.Max, held, total, min(projected, 2*st.Max)))
	fr := frame{t0: st.WindowStart, t1: end, ymax: top * 1.08}

	ch := burnChart{W: chartW, H: chartH,
		XAxis: line{num(plotLeft), num(plotTop + plotH), num(plotLeft + plotW), num(plotTop + plotH)},
		YAxis: line{num(plotLeft), num(plotTop), num(plotLeft), num(plotTop + plotH)},
		Grid:  gridLines(fr), YTicks: yTicks(fr, fmtAmount), XTicks: timeTicks(fr, 4, c)}

	xs, ys := []float64{fr.x(st.WindowStart)}, []float64{fr.y(0)}
	var rows []seriesRow
	var cum int64
	for i, u := range usage {
		cum += u
		xs, ys = append(xs, fr.x(edges[i+1])), append(ys, fr.y(float64(cum)))
		if u != 0 {
			rows = append(rows, seriesRow{From: c.at(edges[i]), To: c.at(edges[i+1]), Amount: amount(m, u), Total: amount(m, cum)})
		}
	}
	ch.Used = points(xs, ys)

	nx := num(fr.x(now))
	ch.Now = line{nx, num(plotTop), nx, num(plotTop + plotH)}
	ch.NowLabel = tick{X: nx, Y: num(plotTop - 8), Text: "now", Anchor: "middle"}
	ly := num(fr.y(float64(st.Max)))
	ch.Limit = line{num(plotLeft), ly, num(plotLeft + plotW), ly}
	ch.LimitLabel = tick{X: num(plotLeft + plotW - 4), Y: num(fr.y(float64(st.Max)) - 6), Text: "limit " + amount(m, st.Max), Anchor: "end"}
	if st.Reserved > 0 {
		ch.Reserved = &line{nx, num(fr.y(float64(st.Used))), nx, num(fr.y(float64(held)))}
	}
	if f != nil && end.After(now) {
		x1, y1 := fr.x(now), fr.y(float64(held))
		x2, y2 := fr.x(end), fr.y(float64(projected))
		if p := float64(projected); p > fr.ymax && p > float64(held) { // clip at the top of the plot
			k := (fr.ymax - float64(held)) / (p - float64(held))
			x2, y2 = x1+(x2-x1)*k, fr.y(fr.ymax)
		}
		ch.Forecast = &line{num(x1), num(y1), num(x2), num(y2)}
		ch.Red = !f.ExhaustsAt.IsZero()
		if e := f.ExhaustsAt; !e.IsZero() && !e.Before(now) && !e.After(end) {
			ch.Exhaust = &tick{X: num(fr.x(e)), Y: ly, Text: "runs out " + c.at(e)}
		}
	}

	ch.Title = "Burn-down of limit " + l.ID + " (" + who(l) + ")"
	ch.Desc = "Usage of " + per(l) + " from " + c.at(st.WindowStart) + " to " + c.at(now) + ": " +
		amount(m, st.Used) + " used"
	if st.Reserved > 0 {
		ch.Desc += " and " + amount(m, st.Reserved) + " reserved"
	}
	ch.Desc += " of a limit of " + amount(m, st.Max) + " (" + percent(held, st.Max) + ")."
	if f != nil {
		if s := forecastText(st, f, c); s != "" {
			ch.Desc += " Forecast: " + s + "."
		}
	}
	return ch, rows
}
