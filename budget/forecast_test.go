package budget_test

import (
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func TestForecastSpan(t *testing.T) {
	start := instant("2026-03-02T00:00:00Z")
	tests := []struct {
		now  string
		want string
	}{
		{"2026-03-02T12:00:00Z", "2026-03-02T09:00:00Z"}, // a quarter of 12 h
		{"2026-03-02T00:02:00Z", "2026-03-02T00:01:00Z"}, // a quarter is 30 s: at least a minute
		{"2026-03-02T00:00:30Z", "2026-03-02T00:00:00Z"}, // a minute is more than elapsed: all of it
		{"2026-03-02T00:00:00Z", "2026-03-02T00:00:00Z"}, // nothing elapsed: an empty span
	}
	for _, tt := range tests {
		if got := budget.ForecastSpan(start, instant(tt.now)); !got.Equal(instant(tt.want)) {
			t.Errorf("ForecastSpan(%s) = %v; want %s", tt.now, got, tt.want)
		}
	}
}

// The formula at fixed instants: rate = recent / span, forecast = used +
// reserved + rate x time left, exhausts = now + room / rate when before
// the reset.
func TestForecastOf(t *testing.T) {
	daily := budget.Limit{ID: "d", Key: "k", Metric: budget.MetricTokens, Max: 100000, Window: budget.Window{Kind: budget.Daily, Zone: time.UTC}}
	once := daily
	once.Window = budget.Window{Kind: budget.Once, Anchor: instant("2026-03-01T00:00:00Z")}
	noon := instant("2026-03-02T12:00:00Z")
	since := instant("2026-03-02T09:00:00Z") // 10,800 s before noon
	st := func(l budget.Limit, max, used, reserved int64) budget.Status {
		s := budget.Status{Limit: l, Max: max, Used: used, Reserved: reserved, WindowStart: instant("2026-03-02T00:00:00Z"), ResetAt: instant("2026-03-03T00:00:00Z")}
		if l.Window.Kind == budget.Once {
			s.WindowStart, s.ResetAt = l.Window.Anchor, budget.Forever
		}
		return s
	}
	tests := []struct {
		name         string
		st           budget.Status
		recent       int64
		wantRate     float64
		wantForecast int64
		wantExhausts string // "" for never
	}{
		{"1 a second, room to spare", st(daily, 100000, 50000, 0), 10800, 1, 50000 + 43200, ""},
		{"1 a second, runs out at 20:20", st(daily, 80000, 50000, 0), 10800, 1, 93200, "2026-03-02T20:20:00Z"},
		{"reservations count as held", st(daily, 80000, 40000, 10000), 10800, 1, 93200, "2026-03-02T20:20:00Z"},
		{"exactly at the reset is not before it", st(daily, 93200, 50000, 0), 10800, 1, 93200, ""},
		{"a fraction of a second rounds up", st(daily, 100000, 99999, 0), 32400, 3, 99999 + 129600, "2026-03-02T12:00:01Z"},
		{"no recent usage: holds still", st(daily, 100000, 50000, 0), 0, 0, 50000, ""},
		{"already out", st(daily, 100000, 100000, 5), 0, 0, 100005, "2026-03-02T12:00:00Z"},
		{"once: no reset, so no forecast at a reset", st(once, 100000, 50000, 0), 10800, 1, -1, "2026-03-03T01:53:20Z"},
		{"once, idle: never", st(once, 100000, 50000, 0), 0, 0, -1, ""},
	}
	for _, tt := range tests {
		f := budget.ForecastOf(&tt.st, tt.recent, since, noon)
		var exh string
		if !f.ExhaustsAt.IsZero() {
			exh = f.ExhaustsAt.UTC().Format(time.RFC3339)
		}
		if f.Rate != tt.wantRate || f.ForecastUsed != tt.wantForecast || exh != tt.wantExhausts || !f.Since.Equal(since) {
			t.Errorf("%s: ForecastOf = rate %v, forecast %d, exhausts %q; want %v, %d, %q", tt.name, f.Rate, f.ForecastUsed, exh, tt.wantRate, tt.wantForecast, tt.wantExhausts)
		}
	}
}
