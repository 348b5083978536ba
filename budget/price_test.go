package budget_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func TestParseAndFormatUSD(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{"25.50", 25_500_000, ""},
		{"25", 25_000_000, ""},
		{"0.000001", 1, ""},
		{".5", 500_000, ""},
		{"$1", 1_000_000, ""},
		{"1.0000001", 0, "more than 6 decimal places"},
		{"-1", 0, "non-negative"},
		{"1e3", 0, "non-negative"},
		{"", 0, "non-negative"},
		{".", 0, "non-negative"},
		{"abc", 0, "non-negative"},
	} {
		got, err := budget.ParseUSD("limit", tc.in)
		if tc.err == "" && (err != nil || got != tc.want) || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "limit")) {
			t.Errorf("ParseUSD(%q) = %d, %v; want %d, error %q", tc.in, got, err, tc.want, tc.err)
		}
	}
	for micros, want := range map[int64]string{25_500_000: "25.50", 1_000_000: "1.00", 125: "0.000125", 0: "0.00", 1_234_567: "1.234567"} {
		if got := budget.FormatUSD(micros); got != want {
			t.Errorf("FormatUSD(%d) = %q; want %q", micros, got, want)
		}
	}
}

func TestCost(t *testing.T) {
	// $2.50 in, $10 out, cached reads at $1.25, writes at $3.125, per 1M tokens.
	p := budget.Price{Input: 2_500_000, Output: 10_000_000, CacheRead: 1_250_000, CacheWrite: 3_125_000, Reasoning: 10_000_000}
	for _, tc := range []struct {
		name string
		u    budget.Usage
		want int64
	}{
		{"plain", budget.Usage{Input: 1000, Output: 500}, 2500 + 5000},
		{"cached input at the cache rate", budget.Usage{Input: 1000, CacheRead: 800, Output: 0}, 200*2500/1000 + 800*1250/1000},
		{"cache writes", budget.Usage{Input: 1000, CacheWrite: 1000}, 3125},
		{"reasoning", budget.Usage{Output: 100, Reasoning: 100}, 2000},
		{"half rounds up", budget.Usage{Input: 1}, 3},                       // 2.5 micro-dollars
		{"below half rounds down", budget.Usage{CacheRead: 1, Input: 1}, 1}, // 1.25
		{"nothing", budget.Usage{}, 0},
		{"huge saturates", budget.Usage{Input: budget.MaxTokens, Output: budget.MaxTokens}, budget.MaxTokens},
	} {
		if got := p.Cost(&tc.u); got != tc.want {
			t.Errorf("%s: Cost = %d; want %d", tc.name, got, tc.want)
		}
	}
	if got := p.EstimateCost(budget.Estimate{Input: 1, Output: 1, Tokens: 1}); got != 3+10+10 {
		t.Errorf("EstimateCost = %d; want 23 (rounded up; unsplit at the larger price)", got)
	}
}

func TestPriceLookup(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ps := budget.NewPrices([]budget.Price{
		{Provider: "openai", Model: "gpt-4o", From: t0, Input: 1},
		{Provider: "openai", Model: "gpt-4o", From: t0.Add(48 * time.Hour), Input: 2},
		{Provider: "openai", Model: "gpt-4o*", From: t0, Input: 3},
		{Provider: "openai", Model: "gpt-*", From: t0, Input: 4},
		{Provider: "anthropic", Model: "claude-*-4-5", From: t0, Input: 5},
		// Two patterns of one length, with versions interleaved in time:
		// each keeps its own versions.
		{Provider: "x", Model: "a*", From: t0, Input: 6},
		{Provider: "x", Model: "b*", From: t0.Add(time.Hour), Input: 7},
		{Provider: "x", Model: "a*", From: t0.Add(2 * time.Hour), Input: 8},
		{Provider: "x", Model: "longer-pattern-*", From: t0, Input: 9},
		{Provider: "x", Model: "longer-*", From: t0, Input: 10},
	})
	for _, tc := range []struct {
		provider, model string
		at              time.Time
		want            int64 // 0: no price
	}{
		{"openai", "gpt-4o", t0, 1},
		{"openai", "gpt-4o", t0.Add(47 * time.Hour), 1},
		{"openai", "gpt-4o", t0.Add(48 * time.Hour), 2},
		{"openai", "gpt-4o", t0.Add(-time.Second), 0},
		{"openai", "gpt-4o-mini", t0, 3},
		{"openai", "gpt-5", t0, 4},
		{"openai", "o1", t0, 0},
		{"anthropic", "claude-sonnet-4-5", t0, 5},
		{"anthropic", "gpt-4o", t0, 0},
		{"x", "a1", t0.Add(90 * time.Minute), 6},
		{"x", "a1", t0.Add(3 * time.Hour), 8},
		{"x", "b1", t0.Add(3 * time.Hour), 7},
		{"x", "longer-pattern-1", t0, 9},
		{"x", "longer-1", t0, 10},
	} {
		p := ps.Lookup(tc.provider, tc.model, tc.at)
		if got := int64(0); p != nil {
			got = p.Input
			if got != tc.want {
				t.Errorf("Lookup(%s, %s, %s) = %d; want %d", tc.provider, tc.model, tc.at, got, tc.want)
			}
		} else if tc.want != 0 {
			t.Errorf("Lookup(%s, %s, %s) = none; want %d", tc.provider, tc.model, tc.at, tc.want)
		}
	}
}

// TestCostCacheWritesByLifetime: the 1-hour part of an event's cache
// writes is priced at the row's 1-hour price and the rest at the
// cache-write price; a row given no 1-hour price prices every write at the
// cache-write price. Rounding stays half up on the event's whole cost.
func TestCostCacheWritesByLifetime(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	oneHour, fiveMin := "6", "3.75"
	// $3 in, $15 out, writes at $3.75 (5 minutes), $6 (1 hour), per 1M tokens.
	with, err := budget.PriceSpec{Provider: "anthropic", Model: "claude", Input: "3", Output: "15", CacheWrite: &fiveMin, CacheWrite1h: &oneHour}.Parse(now)
	if err != nil || with.CacheWrite1h != 6_000_000 {
		t.Fatalf("Parse = %+v, %v; want the 1-hour price $6", with, err)
	}
	without, err := budget.PriceSpec{Provider: "anthropic", Model: "claude", Input: "3", Output: "15", CacheWrite: &fiveMin}.Parse(now)
	if err != nil || without.CacheWrite1h != without.CacheWrite {
		t.Fatalf("Parse = %+v, %v; want no 1-hour price to be the cache-write price", without, err)
	}
	for _, tc := range []struct {
		name          string
		u             budget.Usage
		with, without int64
	}{
		{"5-minute writes only", budget.Usage{Input: 1000, CacheWrite: 1000}, 3750, 3750},
		{"1-hour writes only", budget.Usage{Input: 1000, CacheWrite: 1000, CacheWrite1h: 1000}, 6000, 3750},
		// 100 uncached 0.3, 600 5-minute 2.25, 400 1-hour 2.4 (or 1.5), 10 out 0.15.
		{"split writes", budget.Usage{Input: 1100, CacheWrite: 1000, CacheWrite1h: 400, Output: 10}, 300 + 2250 + 2400 + 150, 300 + 3750 + 150},
		{"half rounds up", budget.Usage{Input: 1, CacheWrite: 1, CacheWrite1h: 1}, 6, 4},                 // 6 and 3.75 micro-dollars
		{"the sum rounds to the nearest", budget.Usage{Input: 2, CacheWrite: 2, CacheWrite1h: 1}, 10, 8}, // 3.75+6 = 9.75, and 7.5
	} {
		if got := with.Cost(&tc.u); got != tc.with {
			t.Errorf("%s: Cost with a 1-hour price = %d; want %d", tc.name, got, tc.with)
		}
		if got := without.Cost(&tc.u); got != tc.without {
			t.Errorf("%s: Cost without a 1-hour price = %d; want %d", tc.name, got, tc.without)
		}
	}
	neg := "-1"
	if _, err := (budget.PriceSpec{Provider: "p", Model: "m", Input: "1", Output: "1", CacheWrite1h: &neg}).Parse(now); err == nil || !strings.Contains(err.Error(), "cache_write_1h") {
		t.Errorf("Parse of a negative 1-hour price = %v; want an error naming cache_write_1h", err)
	}
}

func TestPriceSpec(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p, err := budget.PriceSpec{Provider: "openai", Model: "GPT-4o-2024-08-06", Input: "2.50", Output: "10"}.Parse(now)
	if err != nil || p.Model != "gpt-4o" || p.Input != 2_500_000 || p.CacheRead != 2_500_000 || p.CacheWrite != 2_500_000 || p.Reasoning != 10_000_000 || !p.From.Equal(now) {
		t.Fatalf("Parse = %+v, %v; want defaults from input and output", p, err)
	}
	neg := "-1"
	for _, tc := range []struct {
		spec  budget.PriceSpec
		field string
	}{
		{budget.PriceSpec{Model: "m", Input: "1", Output: "1"}, "provider"},
		{budget.PriceSpec{Provider: "p", Input: "1", Output: "1"}, "model"},
		{budget.PriceSpec{Provider: "p", Model: "m", Input: "-1", Output: "1"}, "input"},
		{budget.PriceSpec{Provider: "p", Model: "m", Input: "1", Output: "1.1234567"}, "output"},
		{budget.PriceSpec{Provider: "p", Model: "m", Input: "1", Output: "1", CacheRead: &neg}, "cache_read"},
		{budget.PriceSpec{Provider: "p", Model: "m", Output: "1"}, "input"},
	} {
		if _, err := tc.spec.Parse(now); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Parse(%+v) = %v; want an error naming %s", tc.spec, err, tc.field)
		}
	}
}

// TestPricesForTierAndThreshold: a request is priced at its tier's row with
// the largest prompt threshold below its prompt, each row at its newest
// version in force; a tier without a row of its own is priced at the
// standard tier's, and the standard names providers give ("default",
// "on_demand") are the standard tier.
func TestPricesForTierAndThreshold(t *testing.T) {
	d := func(s string) time.Time { t, _ := time.Parse(time.DateOnly, s); return t }
	spec := func(tier string, above int64, from, in, out string) budget.Price {
		p, err := budget.PriceSpec{Provider: "google", Model: "gemini-2.5-pro", Tier: tier, AboveInput: above, From: d(from), Input: in, Output: out}.Parse(d(from))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	table := budget.NewPrices([]budget.Price{
		spec("", 0, "2026-01-01", "1.25", "10"),
		spec("", 200_000, "2026-01-01", "2.50", "15"),
		spec("", 0, "2026-06-01", "1.00", "8"), // a newer standard version
		spec("Flex", 0, "2026-01-01", "0.625", "5"),
		spec("priority", 0, "2026-01-01", "2.25", "18"),
	})
	at := d("2026-03-01")
	for _, c := range []struct {
		tier  string
		input int64
		at    time.Time
		want  string // input price
	}{
		{"", 1000, at, "1.25"},
		{"default", 200_000, at, "1.25"}, // at the threshold: not above it
		{"", 200_001, at, "2.50"},
		{"on_demand", 500_000, at, "2.50"},
		{"flex", 1000, at, "0.625"},
		{"flex", 300_000, at, "0.625"}, // flex has no long-context row of its own
		{"priority", 1000, at, "2.25"},
		{"batch", 1000, at, "1.25"}, // no batch row: the standard tier's
		{"batch", 300_000, at, "2.50"},
		{"", 1000, d("2026-07-01"), "1.00"},
		{"", 300_000, d("2026-07-01"), "2.50"}, // the long-context row has no newer version
	} {
		p := table.For("google", "gemini-2.5-pro", c.tier, c.input, c.at)
		if p == nil || budget.FormatUSD(p.Input) != budget.FormatUSD(mustUSD(t, c.want)) {
			t.Errorf("For(%q, %d, %s) = %+v; want input %s", c.tier, c.input, c.at.Format(time.DateOnly), p, c.want)
		}
	}
	if p := table.For("google", "gemini-2.5-pro", "", 1000, d("2025-12-31")); p != nil {
		t.Errorf("before every version: %+v", p)
	}
	// The cost changes at the threshold: 200,000 prompt tokens at $1.25,
	// 200,001 at $2.50 (per million), 1,000 output at $10 or $15.
	for _, c := range []struct {
		input int64
		want  int64
	}{{200_000, 250_000 + 10_000}, {200_001, 500_003 + 15_000}} {
		u := budget.Usage{Input: c.input, Output: 1000}
		if got := table.For("google", "gemini-2.5-pro", "", c.input, at).Cost(&u); got != c.want {
			t.Errorf("cost of %d prompt tokens: %d; want %d micro-dollars", c.input, got, c.want)
		}
	}
	for _, bad := range []budget.PriceSpec{
		{Provider: "p", Model: "m", Input: "1", Output: "1", AboveInput: -1},
		{Provider: "p", Model: "m", Input: "1", Output: "1", Tier: "fl*x"},
		{Provider: "p", Model: "m", Input: "1", Output: "1", Tier: "fl\nex"},
	} {
		if _, err := bad.Parse(at); !errors.Is(err, budget.ErrInvalid) {
			t.Errorf("%+v: %v; want budget.ErrInvalid", bad, err)
		}
	}
}

func mustUSD(t *testing.T, s string) int64 {
	t.Helper()
	v, err := budget.ParseUSD("usd", s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestParseAmount: dollars for a usd limit, a whole number for the others.
func TestParseAmount(t *testing.T) {
	for _, c := range []struct {
		metric budget.Metric
		in     string
		want   int64
		err    string
	}{
		{budget.MetricUSD, "2.50", 2_500_000, ""},
		{budget.MetricUSD, "1.0000001", 0, "more than 6 decimal places"},
		{budget.MetricTokens, " 1000 ", 1000, ""},
		{budget.MetricTokens, "1.5", 0, `by "1.5": must be a whole number`},
	} {
		got, err := budget.ParseAmount("by", c.metric, c.in)
		if c.err == "" && (err != nil || got != c.want) {
			t.Errorf("ParseAmount(%s, %q) = %d, %v; want %d", c.metric, c.in, got, err, c.want)
		}
		if c.err != "" && (!errors.Is(err, budget.ErrInvalid) || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("ParseAmount(%s, %q) = %d, %v; want invalid %q", c.metric, c.in, got, err, c.err)
		}
	}
}
