package storetest

import (
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func init() {
	extra = append(extra, suiteCase{"CacheWritePricedByLifetime", testCacheWriteByLifetime})
}

// A price row's 1-hour cache-write price is stored and read back as given
// (a row given none reads back the cache-write price), also by another
// tracker on a fresh open of the store, and an event's 1-hour cache writes
// are charged at it, the rest of its writes at the cache-write price.
func testCacheWriteByLifetime(t *testing.T, newDB NewDB) {
	tr, c, open := setup(t, newDB)
	from := T0.Add(-time.Hour)
	fiveMin, oneHour := "3.75", "6"
	if _, err := tr.SetPrices(ctx,
		budget.PriceSpec{Provider: "anthropic", Model: "claude-sonnet-4-5", From: from, Input: "3", Output: "15", CacheWrite: &fiveMin, CacheWrite1h: &oneHour},
		budget.PriceSpec{Provider: "anthropic", Model: "claude-haiku", From: from, Input: "1", Output: "5", CacheWrite: &fiveMin},
	); err != nil {
		t.Fatal(err)
	}
	other := NewTracker(t, open(), c, time.Second)
	ps, err := other.ListPrices(ctx)
	if err != nil || len(ps) != 2 {
		t.Fatalf("ListPrices = %+v, %v; want the two rows", ps, err)
	}
	if ps[0].Model != "claude-haiku" || ps[0].CacheWrite1h != 3_750_000 || ps[1].Model != "claude-sonnet-4-5" || ps[1].CacheWrite1h != 6_000_000 || ps[1].CacheWrite != 3_750_000 {
		t.Fatalf("ListPrices = %+v; want haiku's 1-hour price $3.75 (its cache-write price), sonnet's $6", ps)
	}
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Metric: "usd", Window: "monthly"}, 100*budget.MicrosPerUSD)
	at := T0.Add(time.Minute)
	for _, m := range []struct {
		model string
		cost  int64
	}{
		// 100k uncached, 600k 5-minute writes, 400k 1-hour writes.
		{"claude-sonnet-4-5", 300_000 + 2_250_000 + 2_400_000},
		{"claude-haiku", 100_000 + 3_750_000},
	} {
		req := budget.Request{Key: "k", Provider: "anthropic", Model: m.model}
		before, _ := Used(t, tr, req, at, l.ID)
		RecordSync(t, tr, budget.Usage{Key: "k", Provider: "anthropic", Model: m.model, At: at,
			Input: 1_100_000, CacheWrite: 1_000_000, CacheWrite1h: 400_000})
		if after, _ := Used(t, tr, req, at, l.ID); after-before != m.cost {
			t.Errorf("%s: 1-hour writes cost %d micro-dollars; want %d", m.model, after-before, m.cost)
		}
	}
}
