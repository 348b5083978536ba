package dashboard

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// Charts are SVGs drawn here in a viewBox of chartW x chartH user units
// and scaled to the page's width by the stylesheet. The plot area leaves
// room for the axis labels.
const (
	chartW     = 800
	chartH     = 320
	plotLeft   = 84
	plotRight  = 16
	plotTop    = 36
	plotBottom = 44
	plotW      = chartW - plotLeft - plotRight
	plotH      = chartH - plotTop - plotBottom
)

// tick is an axis label and where it goes.
type tick struct {
	X, Y   string
	Text   string
	Anchor string // text-anchor: start, middle or end
	Class  string // "mid" for the labels a narrow screen leaves out
}

// line is a segment.
type line struct{ X1, Y1, X2, Y2 string }

// frame maps a time range and an amount range onto the plot area.
type frame struct {
	t0, t1 time.Time
	ymax   float64
}

func (f frame) x(t time.Time) float64 {
	span := f.t1.Sub(f.t0)
	if span <= 0 {
		return plotLeft
	}
	p := float64(t.Sub(f.t0)) / float64(span)
	return plotLeft + min(max(p, 0), 1)*plotW
}

func (f frame) y(v float64) float64 {
	if f.ymax <= 0 {
		return plotTop + plotH
	}
	return plotTop + plotH - min(max(v/f.ymax, 0), 1)*plotH
}

// num formats a coordinate with at most one decimal.
func num(x float64) string {
	return strconv.FormatFloat(math.Round(x*10)/10, 'f', -1, 64)
}

// niceStep is a round step (1, 2 or 5 times a power of ten) that cuts
// [0, v] into about n parts.
func niceStep(v float64, n int) float64 {
	if v <= 0 || n <= 0 {
		return 1
	}
	raw := v / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// yTicks labels the y axis from 0 to f.ymax in round steps, with format.
func yTicks(f frame, format func(int64) string) []tick {
	step := niceStep(f.ymax, 4)
	var out []tick
	for v := 0.0; v <= f.ymax*1.0001; v += step {
		out = append(out, tick{X: num(plotLeft - 8), Y: num(f.y(v) + 5), Text: format(int64(v)), Anchor: "end"})
	}
	return out
}

// gridLines are horizontal lines at the y ticks' amounts.
func gridLines(f frame) []line {
	step := niceStep(f.ymax, 4)
	var out []line
	for v := step; v <= f.ymax*1.0001; v += step {
		y := num(f.y(v))
		out = append(out, line{num(plotLeft), y, num(plotLeft + plotW), y})
	}
	return out
}

// timeTicks labels the x axis at n+1 evenly spaced instants of [t0, t1].
func timeTicks(f frame, n int, c clock) []tick {
	layout := "15:04"
	switch span := f.t1.Sub(f.t0); {
	case span > 3*24*time.Hour:
		layout = "Jan 2"
	case span > 20*time.Hour:
		layout = "Jan 2 15:04"
	case span < 5*time.Minute:
		layout = "15:04:05"
	}
	out := make([]tick, 0, n+1)
	for i := 0; i <= n; i++ {
		t := f.t0.Add(time.Duration(float64(f.t1.Sub(f.t0)) * float64(i) / float64(n)))
		a := "middle"
		switch i {
		case 0:
			a = "start"
		case n:
			a = "end"
		}
		tk := tick{X: num(f.x(t)), Y: num(plotTop + plotH + 28), Text: t.In(c.loc).Format(layout), Anchor: a}
		if a == "middle" {
			tk.Class = "mid"
		}
		out = append(out, tk)
	}
	return out
}

// points is an SVG polyline's points attribute.
func points(xs, ys []float64) string {
	var b strings.Builder
	for i := range xs {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(num(xs[i]))
		b.WriteByte(',')
		b.WriteString(num(ys[i]))
	}
	return b.String()
}
