package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func init() {
	extra = append(extra,
		suiteCase{"DollarBudgets", testDollarBudgets},
		suiteCase{"DollarReservationsExact", testDollarReservationsExact},
		suiteCase{"FlexibleOutputFitsDollars", testFlexibleOutputFitsDollars},
		suiteCase{"PricesByTierAndPromptSize", testPricesByTierAndPromptSize},
	)
}

func setPrice(t *testing.T, tr *budget.Tracker, provider, model, in, out string, from time.Time, cacheRead *string) {
	t.Helper()
	if _, err := tr.SetPrices(ctx, budget.PriceSpec{Provider: provider, Model: model, Input: in, Output: out, From: from, CacheRead: cacheRead}); err != nil {
		t.Fatalf("SetPrices: %v", err)
	}
}

// A $1.00 monthly budget: events cost what the price in force at their
// instant says (cached input at the cache rate), a later price version
// changes only later events, the refusal comes at the right request, and
// an unpriced model is refused at admission but counted when it happened.
func testDollarBudgets(t *testing.T, newDB NewDB) {
	tr, c, _ := setup(t, newDB)
	cr := "1.25"
	setPrice(t, tr, "openai", "gpt-4o", "2.50", "10", T0.Add(-time.Hour), &cr)
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Metric: "usd", Window: "monthly"}, 1_000_000)
	at := T0.Add(time.Minute)
	// 100k input of which 80k cached, 10k output: 20k x 2.50 + 80k x 1.25 + 10k x 10 = 0.05 + 0.10 + 0.10.
	RecordSync(t, tr, budget.Usage{RequestID: "a", Key: "k", Provider: "openai", Model: "gpt-4o-2024-08-06",
		Input: 100_000, CacheRead: 80_000, Output: 10_000, At: at})
	if u, _ := Used(t, tr, budget.Request{Key: "k", Provider: "openai", Model: "gpt-4o"}, at, l.ID); u != 250_000 {
		t.Fatalf("used %d micro-dollars; want 250000 ($0.25)", u)
	}
	// A new price from T0+1h: only events from then on cost it.
	setPrice(t, tr, "openai", "gpt-4o", "5", "20", T0.Add(time.Hour), nil)
	RecordSync(t, tr, budget.Usage{RequestID: "b", Key: "k", Provider: "openai", Model: "gpt-4o", Input: 10_000, At: at},
		budget.Usage{RequestID: "c", Key: "k", Provider: "openai", Model: "gpt-4o", Input: 10_000, At: T0.Add(2 * time.Hour)})
	later := T0.Add(3 * time.Hour)
	if u, _ := Used(t, tr, budget.Request{Key: "k", Provider: "openai", Model: "gpt-4o"}, later, l.ID); u != 250_000+25_000+50_000 {
		t.Fatalf("used %d; want 325000: b at the old price, c at the new", u)
	}
	// 675000 left. 33,750 input tokens at $20/M output? Estimates: input at
	// $5, output at $20: 100k in + 10k out = 0.50 + 0.20 = 0.70 > 0.675.
	c.Set(later)
	req := budget.Request{Key: "k", Provider: "openai", Model: "gpt-4o", Estimate: budget.Estimate{Input: 100_000, Output: 10_000}}
	var ex *budget.ExceededError
	if _, err := tr.Reserve(ctx, req, time.Minute); !errors.As(err, &ex) || ex.Decision.Breach.Limit.ID != l.ID {
		t.Fatalf("Reserve of a $0.70 estimate with $0.675 left = %v; want refused by the usd limit", err)
	}
	req.Estimate.Output = 8_750 // exactly $0.675
	r, err := tr.Reserve(ctx, req, time.Minute)
	if err != nil {
		t.Fatalf("Reserve of exactly what is left = %v; want admitted", err)
	}
	if r.Estimate.USD != 675_000 {
		t.Fatalf("reservation holds %d micro-dollars; want 675000", r.Estimate.USD)
	}
	if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 1_000, Output: 100}); err != nil {
		t.Fatal(err)
	}
	// An unpriced model is refused while a usd limit applies...
	var up *budget.UnpricedError
	_, err = tr.Reserve(ctx, budget.Request{Key: "k", Provider: "openai", Model: "o9-mystery", Estimate: tokens(1)}, time.Minute)
	if !errors.As(err, &up) || up.Model != "o9-mystery" {
		t.Fatalf("Reserve of an unpriced model = %v; want UnpricedError naming it", err)
	}
	d, err := tr.CheckAt(ctx, budget.Request{Key: "k", Provider: "openai", Model: "o9-mystery", Estimate: tokens(1)}, later)
	if err != nil || d.Allowed || d.Unpriced == nil || !errors.As(d.Err(), &up) {
		t.Fatalf("Check of an unpriced model = %+v, %v; want refused as unpriced", d, err)
	}
	// ...but what it already used is stored, at $0, and counted as unpriced.
	before := tr.Stats().Unpriced
	RecordSync(t, tr, budget.Usage{RequestID: "d", Key: "k", Provider: "openai", Model: "o9-mystery", Input: 5, At: later})
	if got := tr.Stats().Unpriced - before; got != 1 {
		t.Fatalf("Stats.Unpriced grew by %d; want 1", got)
	}
	// No usd limit on another key: its unpriced usage is not refused.
	if d, err := tr.CheckAt(ctx, budget.Request{Key: "other", Provider: "openai", Model: "o9-mystery", Estimate: tokens(1)}, later); err != nil || !d.Allowed {
		t.Fatalf("Check without a usd limit = %+v, %v; want allowed", d, err)
	}
	noDrift(t, tr)
}

// 64 reservations at once on two handles never take a usd limit over.
func testDollarReservationsExact(t *testing.T, newDB NewDB) {
	a, b, _ := twoHandles(t, newDB)
	setPrice(t, a, "openai", "gpt-4o", "2.50", "10", T0.Add(-time.Hour), nil)
	l := SetLimit(t, a, budget.LimitSpec{Key: "k", Metric: "usd", Window: "monthly"}, 1_000_000)
	req := budget.Request{Key: "k", Provider: "openai", Model: "gpt-4o", Estimate: budget.Estimate{Input: 10_000, Output: 5_000}} // $0.075
	rs := reserveAll(t, a, b, 64, func(int) (budget.Request, budget.ReserveOptions) {
		return req, budget.ReserveOptions{TTL: time.Minute}
	})
	_, res := Used(t, a, req, T0, l.ID)
	if n := admitted(rs); n != 13 || res != 13*75_000 {
		t.Fatalf("admitted %d holding %d micro-dollars; want exactly 13 ($0.975 of $1.00)", n, res)
	}
}

// A flexible reservation (MinOutput) shrinks its output to the dollars
// left too, priced at the model's output rate after its input's cost:
// with $0.10 and gpt-4o ($2.50 in, $10 out per million), two requests of
// 100 input + 4096 output ($0.04121 each) fit whole, the third gets the
// 1733 output tokens the $0.01758 left buys, and a fourth is refused.
func testFlexibleOutputFitsDollars(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	setPrice(t, tr, "openai", "gpt-4o", "2.50", "10", T0.Add(-time.Hour), nil)
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Metric: "usd", Window: "daily"}, 100_000)
	req := budget.Request{Key: "k", Provider: "openai", Model: "gpt-4o", Estimate: budget.Estimate{Input: 100, Output: 4096}}
	opts := budget.ReserveOptions{TTL: time.Minute, MinOutput: 16}
	for i, want := range []struct{ out, usd int64 }{{4096, 41_210}, {4096, 41_210}, {1733, 17_580}} {
		r, err := tr.ReserveWith(ctx, req, opts)
		if err != nil {
			t.Fatalf("reservation %d: %v; want admitted with output %d", i+1, err, want.out)
		}
		if r.Estimate.Output != want.out || r.Estimate.USD != want.usd || r.Estimate.Input != 100 {
			t.Fatalf("reservation %d holds %+v; want input 100, output %d, %d micro-dollars", i+1, r.Estimate, want.out, want.usd)
		}
	}
	if _, res := Used(t, tr, req, T0, l.ID); res != 100_000 {
		t.Fatalf("reserved %d micro-dollars; want all 100000", res)
	}
	var ex *budget.ExceededError
	if _, err := tr.ReserveWith(ctx, req, opts); !errors.As(err, &ex) || ex.Decision.Breach.Limit.ID != l.ID {
		t.Fatalf("a fourth reservation = %v; want refused by the usd limit", err)
	}
}

// Price rows by service tier and prompt size are stored apart (same
// provider, model and from), listed, and price events and estimates: a
// flex event at the flex row, a prompt above the threshold at the
// long-context row, a tier without a row at the standard one.
func testPricesByTierAndPromptSize(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	from := T0.Add(-time.Hour)
	specs := []budget.PriceSpec{
		{Provider: "openai", Model: "o3", From: from, Input: "2", Output: "8"},
		{Provider: "openai", Model: "o3", From: from, Tier: "flex", Input: "1", Output: "4"},
		{Provider: "openai", Model: "o3", From: from, AboveInput: 200_000, Input: "4", Output: "16"},
	}
	if _, err := tr.SetPrices(ctx, specs...); err != nil {
		t.Fatal(err)
	}
	ps, err := tr.ListPrices(ctx)
	if err != nil || len(ps) != 3 || ps[0].Tier != "" || ps[0].AboveInput != 0 || ps[1].AboveInput != 200_000 || ps[2].Tier != "flex" {
		t.Fatalf("ListPrices = %+v, %v; want the standard, long-context and flex rows", ps, err)
	}
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Metric: "usd", Window: "monthly"}, 100*budget.MicrosPerUSD)
	at := T0.Add(time.Minute)
	req := budget.Request{Key: "k", Provider: "openai", Model: "o3"}
	for _, c := range []struct {
		u    budget.Usage
		cost int64
	}{
		// 100k in, 10k out: standard 0.20 + 0.08, flex 0.10 + 0.04, batch (no row) standard.
		{budget.Usage{Input: 100_000, Output: 10_000}, 280_000},
		{budget.Usage{Input: 100_000, Output: 10_000, ServiceTier: "flex"}, 140_000},
		{budget.Usage{Input: 100_000, Output: 10_000, ServiceTier: "batch"}, 280_000},
		// 300k in: above 200k, 1.20 + 0.16.
		{budget.Usage{Input: 300_000, Output: 10_000, ServiceTier: "default"}, 1_360_000},
	} {
		before, _ := Used(t, tr, req, at, l.ID)
		u := c.u
		u.Key, u.Provider, u.Model, u.At = "k", "openai", "o3", at
		RecordSync(t, tr, u)
		if after, _ := Used(t, tr, req, at, l.ID); after-before != c.cost {
			t.Errorf("%+v cost %d micro-dollars; want %d", c.u, after-before, c.cost)
		}
	}
	// A flex reservation's estimate is priced at the flex row.
	r, err := tr.Reserve(ctx, budget.Request{Key: "k", Provider: "openai", Model: "o3", ServiceTier: "flex",
		Estimate: budget.Estimate{Input: 100_000, Output: 10_000}}, time.Minute)
	if err != nil || r.Estimate.USD != 140_000 {
		t.Fatalf("flex Reserve = %+v, %v; want its estimate at $0.14", r, err)
	}
}
