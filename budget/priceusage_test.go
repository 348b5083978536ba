package budget_test

import (
	"context"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/budget/internal/memstore"
)

// TestPriceUsageIsTheStoredCost: PriceUsage prices a usage as its event
// is stored (the price in force at its instant, for its tier), marks the
// cost known, and the event recorded with it is stored at exactly that
// cost, even once the price table changed before the writer took it; a
// model no price matches is priced 0 with NoPrice, and stored unpriced.
func TestPriceUsageIsTheStoredCost(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	tr := storeTracker(t, memstore.New(), func(c *budget.Config) { c.Now = func() time.Time { return now } })
	priority := "priority"
	if _, err := tr.SetPrices(ctx,
		budget.PriceSpec{Provider: "openai", Model: "gpt-4o", Input: "2.5", Output: "10", From: now.Add(-time.Hour)},
		budget.PriceSpec{Provider: "openai", Model: "gpt-4o", Tier: priority, Input: "5", Output: "20", From: now.Add(-time.Hour)},
	); err != nil {
		t.Fatal(err)
	}
	u := budget.Usage{RequestID: "r1", Key: "k", Provider: "openai", Model: "GPT-4o-2024-08-06", Input: 400, Output: 100, At: now}
	if err := tr.PriceUsage(ctx, &u); err != nil || u.Cost != 2000 || !u.CostKnown || u.NoPrice {
		t.Fatalf("PriceUsage: cost %d known %v no price %v (%v); want 2000 micro-dollars, known", u.Cost, u.CostKnown, u.NoPrice, err)
	}
	tier := budget.Usage{RequestID: "r2", Key: "k", Provider: "openai", Model: "gpt-4o", ServiceTier: priority, Input: 400, Output: 100, At: now}
	if err := tr.PriceUsage(ctx, &tier); err != nil || tier.Cost != 4000 {
		t.Fatalf("PriceUsage at the priority tier: %d (%v); want 4000", tier.Cost, err)
	}
	unknown := budget.Usage{RequestID: "r3", Key: "k", Provider: "openai", Model: "o9-mystery", Input: 400, At: now}
	if err := tr.PriceUsage(ctx, &unknown); err != nil || unknown.Cost != 0 || !unknown.CostKnown || !unknown.NoPrice {
		t.Fatalf("PriceUsage of an unpriced model: %+v (%v); want cost 0, known, no price", unknown, err)
	}
	// A new price from before the events' instant: the writer would price
	// them at it, but their cost is the one the caller was told.
	if _, err := tr.SetPrices(ctx, budget.PriceSpec{Provider: "openai", Model: "gpt-4o", Input: "100", Output: "100", From: now.Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []budget.Usage{u, tier, unknown} {
		if err := tr.Record(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tr.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[string]budget.Usage{}
	if _, err := tr.Export(ctx, now.Add(-time.Hour), now.Add(time.Hour), "", func(e budget.Usage) error {
		got[e.RequestID] = e
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got["r1"].Cost != 2000 || got["r2"].Cost != 4000 || got["r3"].Cost != 0 || !got["r3"].NoPrice || got["r1"].NoPrice {
		t.Fatalf("stored %+v; want r1 at 2000, r2 at 4000, r3 unpriced", got)
	}
}
