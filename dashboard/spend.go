package dashboard

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// SpendDays is how many UTC days a key's page sums, today included.
const SpendDays = 30

// modelColors is how many models get a colour of their own in the spend
// charts; the rest share the last one as "other models".
const modelColors = 8

// stackChart is a bar per day, stacked by model.
type stackChart struct {
	W, H   int
	XAxis  line
	YAxis  line
	Grid   []line
	Segs   []seg
	XTicks []tick
	YTicks []tick
	Title  string
	Desc   string
}

// seg is one model's part of one day's bar.
type seg struct {
	X, Y, W, H string
	Class      string
	Title      string // "2026-03-01 gpt-4o: 12,345 tokens"
}

// spendModel is a model's line in the legend, with its totals.
type spendModel struct {
	Name, Class                    string
	Tokens, Cost, Requests         string
	tokens, cost, requests, noCost int64
}

// spendRow is one (day, model) of a key's spend table.
type spendRow struct {
	Day, Model, Class      string
	Tokens, Cost, Requests string
}

// spend is what a key's page shows of its last SpendDays days.
type spend struct {
	From, To       string // the days covered
	Tokens, Cost   stackChart
	Models         []spendModel
	Rows           []spendRow
	Total          spendModel
	Unpriced       int64 // requests no price matched: their cost is unknown
	Empty          bool
	TokensSummary  string
	DollarsSummary string
}

// spendDays are the first days of the SpendDays UTC days ending with
// now's.
func spendDays(now time.Time) []time.Time {
	last := budget.Day(now)
	out := make([]time.Time, SpendDays)
	for i := range out {
		out[i] = last.AddDate(0, 0, i-SpendDays+1)
	}
	return out
}

// spendOf lays out the rows of a report by day and model (Values: day,
// model) over days.
func spendOf(key string, rows []budget.ReportRow, days []time.Time) spend {
	s := spend{From: days[0].Format(time.DateOnly), To: days[len(days)-1].Format(time.DateOnly)}
	byModel := map[string]*spendModel{}
	for i := range rows {
		r := &rows[i]
		m := byModel[r.Values[1]]
		if m == nil {
			m = &spendModel{Name: r.Values[1]}
			byModel[r.Values[1]] = m
		}
		m.tokens += r.Tokens()
		m.cost += r.Cost
		m.requests += r.Requests
		m.noCost += r.NoPrice
		s.Unpriced += r.NoPrice
	}
	models := make([]*spendModel, 0, len(byModel))
	for _, m := range byModel {
		models = append(models, m)
	}
	slices.SortFunc(models, func(a, b *spendModel) int {
		if c := cmp.Compare(b.tokens, a.tokens); c != 0 {
			return c
		}
		if c := cmp.Compare(b.cost, a.cost); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	class := map[string]string{}
	other := &spendModel{Name: "other models", Class: "m" + strconv.Itoa(modelColors-1)}
	for i, m := range models {
		switch {
		case i < modelColors-1 || len(models) == modelColors:
			m.Class = "m" + strconv.Itoa(i)
			s.Models = append(s.Models, *m)
		default:
			m.Class = other.Class
			other.tokens += m.tokens
			other.cost += m.cost
			other.requests += m.requests
		}
		class[m.Name] = m.Class
		s.Total.tokens += m.tokens
		s.Total.cost += m.cost
		s.Total.requests += m.requests
	}
	if len(models) > modelColors {
		s.Models = append(s.Models, *other)
	}
	for i := range s.Models {
		fillTotals(&s.Models[i])
	}
	fillTotals(&s.Total)
	s.Empty = len(rows) == 0

	// By day, then in the legend's order: the table's rows and each bar's
	// stack from the bottom up.
	rank := make(map[string]int, len(models))
	for i, m := range models {
		rank[m.Name] = i
	}
	rows = slices.Clone(rows)
	slices.SortStableFunc(rows, func(a, b budget.ReportRow) int {
		if c := cmp.Compare(a.Values[0], b.Values[0]); c != 0 {
			return c
		}
		return cmp.Compare(rank[a.Values[1]], rank[b.Values[1]])
	})
	for i := range rows {
		r := &rows[i]
		s.Rows = append(s.Rows, spendRow{Day: r.Values[0], Model: r.Values[1], Class: class[r.Values[1]],
			Tokens: count(r.Tokens()), Cost: dollars(r.Cost), Requests: count(r.Requests)})
	}

	s.Tokens = stackOf(rows, days, class, func(t *budget.Totals) int64 { return t.Tokens() }, count,
		func(v int64) string { return short(budget.MetricTokens, v) }, "tokens")
	s.Cost = stackOf(rows, days, class, func(t *budget.Totals) int64 { return t.Cost }, dollars,
		func(v int64) string { return short(budget.MetricUSD, v) }, "")
	s.Tokens.Title = "Tokens per day of key " + key + ", by model"
	s.Cost.Title = "Dollars per day of key " + key + ", by model"
	s.TokensSummary = "Key " + key + " used " + s.Total.Tokens + " tokens from " + s.From + " to " + s.To + summary(s.Models, func(m *spendModel) string { return m.Tokens + " tokens" })
	s.DollarsSummary = "Key " + key + " spent " + s.Total.Cost + " from " + s.From + " to " + s.To + summary(s.Models, func(m *spendModel) string { return m.Cost })
	s.Tokens.Desc, s.Cost.Desc = s.TokensSummary, s.DollarsSummary
	return s
}

// summary lists each model's share: ": gpt-4o 1,234 tokens, ...".
func summary(ms []spendModel, f func(*spendModel) string) string {
	if len(ms) == 0 {
		return "."
	}
	out := ":"
	for i := range ms {
		if i > 0 {
			out += ","
		}
		out += " " + ms[i].Name + " " + f(&ms[i])
	}
	return out + "."
}

func fillTotals(m *spendModel) {
	m.Tokens, m.Cost, m.Requests = count(m.tokens), dollars(m.cost), count(m.requests)
}

// stackOf draws one bar per day of days, stacked by model in the order of
// rows, of the amount value picks: each part titled with format and unit,
// the axis labelled with axis.
func stackOf(rows []budget.ReportRow, days []time.Time, class map[string]string, value func(*budget.Totals) int64,
	format, axis func(int64) string, unit string) stackChart {
	idx := make(map[string]int, len(days))
	for i, d := range days {
		idx[d.Format(time.DateOnly)] = i
	}
	totals := make([]int64, len(days))
	for i := range rows {
		if d, ok := idx[rows[i].Values[0]]; ok {
			totals[d] += value(&rows[i].Totals)
		}
	}
	top := slices.Max(totals)
	fr := frame{t0: days[0], t1: days[len(days)-1].AddDate(0, 0, 1), ymax: float64(max(top, 1)) * 1.08}
	ch := stackChart{W: chartW, H: chartH,
		XAxis: line{num(plotLeft), num(plotTop + plotH), num(plotLeft + plotW), num(plotTop + plotH)},
		YAxis: line{num(plotLeft), num(plotTop), num(plotLeft), num(plotTop + plotH)},
		Grid:  gridLines(fr), YTicks: yTicks(fr, axis)}
	slot := float64(plotW) / float64(len(days))
	base := make([]int64, len(days))
	for i := range rows {
		r := &rows[i]
		d, ok := idx[r.Values[0]]
		v := value(&r.Totals)
		if !ok || v <= 0 {
			continue
		}
		y0, y1 := fr.y(float64(base[d])), fr.y(float64(base[d]+v))
		base[d] += v
		title := r.Values[0] + " " + r.Values[1] + ": " + format(v)
		if unit != "" {
			title += " " + unit
		}
		ch.Segs = append(ch.Segs, seg{X: num(plotLeft + slot*float64(d) + slot*0.15), W: num(slot * 0.7),
			Y: num(y1), H: num(y0 - y1), Class: class[r.Values[1]], Title: title})
	}
	for _, d := range []int{0, 7, 14, 21, len(days) - 1} {
		a := "middle"
		switch d {
		case 0:
			a = "start"
		case len(days) - 1:
			a = "end"
		}
		x := plotLeft + slot*(float64(d)+0.5)
		if a == "start" {
			x = plotLeft
		} else if a == "end" {
			x = plotLeft + plotW
		}
		tk := tick{X: num(x), Y: num(plotTop + plotH + 28), Text: days[d].Format("Jan 2"), Anchor: a}
		if a == "middle" {
			tk.Class = "mid"
		}
		ch.XTicks = append(ch.XTicks, tk)
	}
	return ch
}
