package dashboard

import (
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func TestCount(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{{0, "0"}, {999, "999"}, {1000, "1,000"}, {-1234567, "-1,234,567"}, {123456, "123,456"}, {1 << 53, "9,007,199,254,740,992"}} {
		if got := count(c.n); got != c.want {
			t.Errorf("count(%d) = %q; want %q", c.n, got, c.want)
		}
	}
}

func TestDollars(t *testing.T) {
	for _, c := range []struct {
		micros int64
		want   string
	}{{0, "$0.00"}, {1000, "$0.001"}, {4_200, "$0.0042"}, {999_999, "$0.999999"}, {1_000_000, "$1.00"},
		{1_234_565_000, "$1,234.57"}, {-2_500_000, "-$2.50"}} {
		if got := dollars(c.micros); got != c.want {
			t.Errorf("dollars(%d) = %q; want %q", c.micros, got, c.want)
		}
	}
}

func TestSpan(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{{time.Second, "1s"}, {1500 * time.Millisecond, "2s"}, {time.Minute, "1m"}, {61 * time.Second, "2m"},
		{80 * time.Minute, "1h20m"}, {2 * time.Hour, "2h"}, {49 * time.Hour, "2d1h"}, {48 * time.Hour, "2d"}} {
		if got := span(c.d); got != c.want {
			t.Errorf("span(%v) = %q; want %q", c.d, got, c.want)
		}
	}
}

// TestBucketEdges: a window is cut into at most maxBuckets buckets of a
// round step, from its start to now.
func TestBucketEdges(t *testing.T) {
	start := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name      string
		end, full time.Duration // after start
		step      time.Duration
		n         int // buckets
	}{
		{"1h window at half past", 30 * time.Minute, time.Hour, time.Minute, 30},
		{"1h window at 30m30s: a partial last bucket", 30*time.Minute + 30*time.Second, time.Hour, time.Minute, 31},
		{"day at 18:00", 18 * time.Hour, 24 * time.Hour, 30 * time.Minute, 36},
		{"month of 31 days on day 10", 10 * 24 * time.Hour, 31 * 24 * time.Hour, 24 * time.Hour, 10},
		{"90s window", 45 * time.Second, 90 * time.Second, 5 * time.Second, 9},
		{"once, 400 days on", 400 * 24 * time.Hour, 533 * 24 * time.Hour, 14 * 24 * time.Hour, 29},
	} {
		e := bucketEdges(start, start.Add(c.end), start.Add(c.full))
		if len(e)-1 != c.n || e[0] != start || !e[len(e)-1].Equal(start.Add(c.end)) || (len(e) > 2 && e[1].Sub(e[0]) != c.step) {
			t.Errorf("%s: %d buckets from %v to %v, first %v; want %d of %v", c.name, len(e)-1, e[0], e[len(e)-1], e[1].Sub(e[0]), c.n, c.step)
		}
		if len(e)-1 > maxBuckets {
			t.Errorf("%s: %d buckets; want at most %d", c.name, len(e)-1, maxBuckets)
		}
	}
	if e := bucketEdges(start, start, start.Add(time.Hour)); e != nil {
		t.Errorf("an empty range has edges %v", e)
	}
}

// TestBarOf: widths are thousandths of the limit, clamped to it.
func TestBarOf(t *testing.T) {
	for _, c := range []struct {
		used, reserved, max          int64
		usedW, reservedW, remainingW string
		over                         bool
	}{
		{0, 0, 100, "0", "0", "1000", false},
		{25, 25, 100, "250", "250", "500", false},
		{1, 0, 3, "333.33", "0", "666.67", false},
		{90, 30, 100, "900", "100", "0", false},
		{150, 10, 100, "1000", "0", "0", true},
	} {
		b := barOf(c.used, c.reserved, c.max, nil)
		if b.Used != c.usedW || b.Reserved != c.reservedW || b.Remaining != c.remainingW || b.Over != c.over || b.Marker != "" {
			t.Errorf("barOf(%d, %d, %d) = %+v; want used %s reserved %s remaining %s over %v", c.used, c.reserved, c.max, b,
				c.usedW, c.reservedW, c.remainingW, c.over)
		}
	}
}

func TestShort(t *testing.T) {
	for _, c := range []struct {
		m    budget.Metric
		v    int64
		want string
	}{{budget.MetricTokens, 950, "950"}, {budget.MetricTokens, 1500, "1.5k"}, {budget.MetricTokens, 400_000, "400k"},
		{budget.MetricTokens, 2_000_000, "2M"}, {budget.MetricTokens, 1_250_000_000, "1.3B"},
		{budget.MetricUSD, 250_000, "$0.25"}, {budget.MetricUSD, 12_500_000, "$12.50"}, {budget.MetricUSD, 1_500_000_000, "$1.5k"}} {
		if got := short(c.m, c.v); got != c.want {
			t.Errorf("short(%s, %d) = %q; want %q", c.m, c.v, got, c.want)
		}
	}
}
