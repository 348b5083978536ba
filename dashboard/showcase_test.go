package dashboard_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
)

// hostileKey is a key name made of markup, as in the showcase.
const hostileKey = `<img src=x onerror=alert(1)>`

// showcase is a database that looks like a gateway's at now (Monday
// 18:30 UTC): teams platform and research of org acme, each kind of limit,
// a day of traffic, a month of history for search-api, a live
// reservation and a parked provider. The numbers the tests check:
//
//   - lim_search_hourly (search-api, 200,000 tokens per 1h): 150,000 used
//     since 18:00, 65,000 of them in the last 7.5 minutes: it runs out at
//     18:35:47, before the reset;
//   - lim_support_sonnet (support-bot, claude-sonnet-4-5, 400,000 tokens a
//     day): 320,000 used and 30,000 reserved;
//   - lim_batch_prepaid (batch-jobs, 20,000,000 tokens once, since
//     12:00): 14,000,000 used;
//   - lim_default_hourly (150,000 tokens per 1h for each key): notebook-ada
//     has 60,000 in its window, the only key with a counter of it;
//   - the team, org and dollar limits count what they count;
//   - lim_search_hourly and lim_support_sonnet alert at 50, 80 and 100 %:
//     both have crossed 50 %, Sonnet's 80 % too.
func showcase(tb testing.TB) *fixture {
	tb.Helper()
	ctx := context.Background()
	var clock atomic.Int64
	clock.Store(now.UnixNano())
	cfg := budget.DefaultConfig()
	cfg.Now = func() time.Time { return time.Unix(0, clock.Load()).UTC() }
	db, err := tokenbudget.Open(ctx, filepath.Join(tb.TempDir(), "budget.db"), tokenbudget.Options{Create: true, Config: &cfg})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close(context.Background()) })
	f := &fixture{db: db}
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	from := now.AddDate(0, -2, 0)
	_, err = db.SetPrices(ctx,
		budget.PriceSpec{Provider: "openai", Model: "gpt-4o-mini", From: from, Input: "0.15", Output: "0.60"},
		budget.PriceSpec{Provider: "openai", Model: "gpt-4o", From: from, Input: "2.50", Output: "10"},
		budget.PriceSpec{Provider: "anthropic", Model: "claude-sonnet-4-5", From: from, Input: "3", Output: "15"})
	must(err)
	for team, keys := range map[string][]string{"platform": {"search-api", "support-bot"}, "research": {"batch-jobs", "notebook-ada"}} {
		_, err := db.SetTeam(ctx, team, "acme")
		must(err)
		for _, k := range keys {
			must(db.SetKeyTeam(ctx, k, team))
		}
	}
	alerts := &[]int{50, 80, 100}
	f.limit(tb, budget.LimitSpec{ID: "lim_search_hourly", Key: "search-api", Window: "1h"}, 200_000)
	f.limit(tb, budget.LimitSpec{ID: "lim_search_usd", Key: "search-api", Metric: "usd", Window: "daily"}, 10_000_000)
	f.limit(tb, budget.LimitSpec{ID: "lim_support_daily", Key: "support-bot", Window: "daily"}, 3_000_000)
	f.limit(tb, budget.LimitSpec{ID: "lim_support_sonnet", Key: "support-bot", Scope: "model", ScopeValue: "claude-sonnet-4-5", Window: "daily", Alerts: alerts}, 400_000)
	f.limit(tb, budget.LimitSpec{ID: "lim_platform_usd", Team: "platform", Metric: "usd", Window: "monthly"}, 50_000_000)
	f.limit(tb, budget.LimitSpec{ID: "lim_acme_tokens", Org: "acme", Window: "monthly"}, 60_000_000)
	f.limit(tb, budget.LimitSpec{ID: "lim_hostile", Key: hostileKey, Window: "1h"}, 50_000)
	clock.Store(at(12, 0).UnixNano()) // a prepaid balance counts from its creation
	f.limit(tb, budget.LimitSpec{ID: "lim_batch_prepaid", Key: "batch-jobs", Window: "once"}, 20_000_000)
	clock.Store(now.UnixNano())

	var us []budget.Usage
	add := func(key, provider, model string, in, out int64, t time.Time) {
		us = append(us, budget.Usage{Key: key, Provider: provider, Model: model, Input: in, Output: out, At: t})
	}
	// A month of history for search-api's page, before its hourly limit
	// alerts: each of those days would cross its thresholds in that day's
	// window.
	for d := 1; d <= 29; d++ {
		day := now.AddDate(0, 0, -d).Truncate(24 * time.Hour).Add(13 * time.Hour)
		add("search-api", "openai", "gpt-4o-mini", int64(700_000+(d*37%11)*90_000), int64(300_000+(d*17%7)*40_000), day)
		add("search-api", "openai", "gpt-4o", int64(100_000+(d*13%5)*30_000), int64(40_000+(d*7%3)*20_000), day)
		if d%3 == 0 {
			add("search-api", "anthropic", "claude-sonnet-4-5", 60_000, 25_000, day.Add(time.Hour))
		}
	}
	f.record(tb, us...)
	us = us[:0]
	f.limit(tb, budget.LimitSpec{ID: "lim_search_hourly", Key: "search-api", Window: "1h", Alerts: alerts}, 200_000)
	// search-api: gpt-4o every hour of the day, and a busy last half hour.
	for h := 9; h <= 17; h++ {
		add("search-api", "openai", "gpt-4o", 14_000, 6_000, at(h, 0))
	}
	for _, e := range []struct {
		m      int
		tokens int64
	}{{2, 30_000}, {10, 25_000}, {18, 30_000}, {24, 25_000}, {27, 20_000}, {29, 20_000}} {
		add("search-api", "openai", "gpt-4o-mini", e.tokens*7/10, e.tokens*3/10, at(18, e.m))
	}
	// support-bot: gpt-4o-mini every half hour, Sonnet since 17:00.
	for m := 0; m <= 18*60; m += 30 {
		add("support-bot", "openai", "gpt-4o-mini", 30_000, 10_000, at(0, m))
	}
	for _, t := range []time.Time{at(17, 0), at(17, 30), at(18, 0), at(18, 15)} {
		add("support-bot", "anthropic", "claude-sonnet-4-5", 60_000, 20_000, t)
	}
	// batch-jobs: three batches on its prepaid balance.
	add("batch-jobs", "openai", "gpt-4o-mini", 4_000_000, 1_000_000, at(12, 30))
	add("batch-jobs", "openai", "gpt-4o-mini", 4_000_000, 1_000_000, at(15, 0))
	add("batch-jobs", "openai", "gpt-4o-mini", 3_000_000, 1_000_000, at(18, 0))
	add(hostileKey, "openai", "gpt-4o-mini", 4_000, 1_000, at(18, 5))
	f.record(tb, us...)

	if _, err := db.Reserve(ctx, budget.Request{Key: "support-bot", Provider: "anthropic", Model: "claude-sonnet-4-5",
		Estimate: budget.Estimate{Input: 22_000, Output: 8_000}}, time.Hour); err != nil {
		tb.Fatal(err)
	}
	// The default limit, then the only key that uses it in this hour.
	f.limit(tb, budget.LimitSpec{ID: "lim_default_hourly", Default: true, Window: "1h"}, 150_000)
	f.record(tb, budget.Usage{Key: "notebook-ada", Provider: "anthropic", Model: "claude-sonnet-4-5", Input: 45_000, Output: 15_000, At: at(18, 20)})

	if _, err := db.ParkAt(ctx, "azure", budget.RateLimited, 5*time.Minute, nil, at(18, 28)); err != nil {
		tb.Fatal(err)
	}
	return f
}

// at is today's (now's) h:m UTC; minutes past 59 run into the next hours.
func at(h, m int) time.Time { return time.Date(2026, 3, 2, h, m, 0, 0, time.UTC) }
