package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

var ctx = context.Background()

func testScopeMatching(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	g := SetLimit(t, tr, budget.LimitSpec{ID: "g", Key: "k", Window: "1h"}, 1000)
	p := SetLimit(t, tr, budget.LimitSpec{ID: "p", Key: "k", Scope: "provider", ScopeValue: "openai", Window: "1h"}, 500)
	m := SetLimit(t, tr, budget.LimitSpec{ID: "m", Key: "k", Scope: "model", ScopeValue: "gpt-4o", Window: "1h"}, 200)
	SetLimit(t, tr, budget.LimitSpec{ID: "other", Key: "k2", Window: "1h"}, 10)
	RecordSync(t, tr,
		ev("1", "k", "openai", "gpt-4o", 100, 10, T0),
		ev("2", "k", "openai", "gpt-4o-mini", 50, 0, T0),
		ev("3", "k", "anthropic", "claude", 7, 0, T0),
		ev("4", "k2", "openai", "gpt-4o", 1, 0, T0))
	req := budget.Request{Key: "k", Provider: "openai", Model: "gpt-4o"}
	d, err := tr.CheckAt(ctx, req, T0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range d.Limits {
		ids = append(ids, s.Limit.ID)
	}
	if fmt.Sprint(ids) != "[g p m]" {
		t.Fatalf("applicable limits = %v; want [g p m] in listing order", ids)
	}
	for _, c := range []struct {
		id   string
		want int64
	}{{g.ID, 167}, {p.ID, 160}, {m.ID, 110}} {
		if u, _ := Used(t, tr, req, T0, c.id); u != c.want {
			t.Errorf("used of %s = %d; want %d", c.id, u, c.want)
		}
	}
	// A request to another provider sees only the global limit.
	d, _ = tr.CheckAt(ctx, budget.Request{Key: "k", Provider: "anthropic", Model: "claude"}, T0)
	if len(d.Limits) != 1 || d.Limits[0].Limit.ID != "g" {
		t.Fatalf("anthropic request limits = %+v; want only g", d.Limits)
	}
	// The most restrictive breach: m has the least room after the estimate.
	d, _ = tr.CheckAt(ctx, budget.Request{Key: "k", Provider: "openai", Model: "gpt-4o", Estimate: budget.Estimate{Tokens: 400}}, T0)
	if d.Allowed || d.Breach == nil || d.Breach.Limit.ID != "m" {
		t.Fatalf("breach = %+v; want limit m", d.Breach)
	}
	if got := d.Breach.RetryAfterSeconds(); got != 3600 {
		t.Errorf("retry_after_seconds = %d; want 3600 (to 10:00)", got)
	}
	noDrift(t, tr)
}

func testSeedMidWindow(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	// Usage before any limit exists, in today's window and yesterday's.
	RecordSync(t, tr,
		ev("a", "k", "openai", "m", 100, 20, T0.Add(-time.Hour)),
		ev("b", "k", "openai", "m", 30, 0, T0.Add(-24*time.Hour)))
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "daily"}, 1000)
	req := budget.Request{Key: "k", Provider: "openai", Model: "m"}
	if u, _ := Used(t, tr, req, T0, l.ID); u != 120 {
		t.Fatalf("a limit created mid-window sees used = %d; want 120 from the history", u)
	}
	// Reading seeded nothing: the first write creates the row from history.
	RecordSync(t, tr, ev("c", "k", "openai", "m", 5, 0, T0))
	if u, _ := Used(t, tr, req, T0, l.ID); u != 125 {
		t.Fatalf("after one more event used = %d; want 125", u)
	}
	noDrift(t, tr)
}

func testFirstRequestOnce(t *testing.T, newDB NewDB) {
	tr, _, open := setup(t, newDB)
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "1h"}, 1000)
	RecordSync(t, tr, ev("1", "k", "p", "m", 40, 2, T0))
	// A fresh tracker reads the stored row, not the cache.
	tr2 := NewTracker(t, open(), NewClock(T0), 0)
	if u, _ := Used(t, tr2, budget.Request{Key: "k"}, T0, l.ID); u != 42 {
		t.Fatalf("the first request of a window counted as %d; want 42 (once)", u)
	}
	noDrift(t, tr)
}

func testRolloverOnce(t *testing.T, newDB NewDB) {
	tr, _, open := setup(t, newDB)
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "1h"}, 1000)
	other := NewTracker(t, open(), NewClock(T0), time.Second)
	RecordSync(t, tr, ev("1", "k", "p", "m", 10, 0, T0))
	next := T0.Add(time.Hour)
	// Two "processes" write the first events of the next window.
	RecordSync(t, tr, ev("2", "k", "p", "m", 1, 0, next))
	RecordSync(t, other, ev("3", "k", "p", "m", 1, 0, next.Add(time.Minute)))
	r, err := tr.Inspect(ctx, "k", next, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Rollovers) != 1 {
		t.Fatalf("rollovers = %+v; want exactly one", r.Rollovers)
	}
	ro := r.Rollovers[0]
	if ro.LimitID != l.ID || !ro.WindowStart.Equal(next) || !ro.PrevWindowStart.Equal(T0) || ro.PrevUsed != 10 {
		t.Fatalf("rollover = %+v; want limit %s, %v -> %v, prev_used 10", ro, l.ID, T0, next)
	}
	// A window after one without usage logs nothing.
	RecordSync(t, tr, ev("4", "k", "p", "m", 1, 0, next.Add(5*time.Hour)))
	if r, _ = tr.Inspect(ctx, "k", next, 10); len(r.Rollovers) != 1 {
		t.Fatalf("rollovers after a quiet window = %d; want still 1", len(r.Rollovers))
	}
	noDrift(t, tr)
}

func testDuplicates(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "1h"}, 1000)
	if d := RecordSync(t, tr, ev("same", "k", "p", "m", 10, 0, T0)); d[0] {
		t.Fatal("first event reported as duplicate")
	}
	d := RecordSync(t, tr, ev("same", "k", "p", "m", 99, 0, T0), ev("same", "k", "p", "m", 5, 0, T0))
	if !d[0] || !d[1] {
		t.Fatalf("duplicates = %v; want [true true]", d)
	}
	// The same id under another key is not a duplicate.
	if d := RecordSync(t, tr, ev("same", "k2", "p", "m", 10, 0, T0)); d[0] {
		t.Fatal("same request id under another key reported as duplicate")
	}
	// The async path counts duplicates in a metric and never fails on them.
	if err := tr.Record(ctx, ev("same", "k", "p", "m", 1, 0, T0)); err != nil {
		t.Fatal(err)
	}
	fr, err := tr.Flush(ctx)
	if err != nil || fr.Duplicates != 1 || fr.Written != 0 {
		t.Fatalf("Flush = %+v, %v; want 1 duplicate, 0 written", fr, err)
	}
	if u, _ := Used(t, tr, budget.Request{Key: "k"}, T0, l.ID); u != 10 {
		t.Fatalf("used = %d; want 10 (duplicates change nothing)", u)
	}
	if s := tr.Stats(); s.Duplicates != 3 {
		t.Errorf("Stats().Duplicates = %d; want 3", s.Duplicates)
	}
	noDrift(t, tr)
}

func testLateEvents(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "1h"}, 1000)
	RecordSync(t, tr, ev("1", "k", "p", "m", 10, 0, T0), ev("2", "k", "p", "m", 20, 0, T0.Add(time.Hour)))
	// A late event for the earlier window counts there, and logs no rollover.
	RecordSync(t, tr, ev("late", "k", "p", "m", 5, 0, T0.Add(30*time.Minute)))
	// And one in an even earlier window that has no row yet.
	RecordSync(t, tr, ev("later", "k", "p", "m", 3, 0, T0.Add(-3*time.Hour)))
	req := budget.Request{Key: "k"}
	for _, c := range []struct {
		at   time.Time
		want int64
	}{{T0, 15}, {T0.Add(time.Hour), 20}, {T0.Add(-3 * time.Hour), 3}} {
		if u, _ := Used(t, tr, req, c.at, l.ID); u != c.want {
			t.Errorf("used at %v = %d; want %d", c.at, u, c.want)
		}
	}
	r, _ := tr.Inspect(ctx, "k", T0, 10)
	if len(r.Rollovers) != 1 || !r.Rollovers[0].WindowStart.Equal(T0.Add(time.Hour)) {
		t.Fatalf("rollovers = %+v; want only the one into %v", r.Rollovers, T0.Add(time.Hour))
	}
	noDrift(t, tr)
}

func testDisabled(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	off := false
	max := int64(10)
	l, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "1h", Max: &max, Enabled: &off})
	if err != nil {
		t.Fatal(err)
	}
	RecordSync(t, tr, ev("1", "k", "p", "m", 50, 0, T0))
	d, _ := tr.CheckAt(ctx, budget.Request{Key: "k", Estimate: budget.Estimate{Tokens: 5}}, T0)
	if !d.Allowed || len(d.Limits) != 0 {
		t.Fatalf("a disabled limit refused or was listed: %+v", d)
	}
	on := true
	if _, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "1h", Enabled: &on}); err != nil {
		t.Fatal(err)
	}
	if u, _ := Used(t, tr, budget.Request{Key: "k"}, T0, l.ID); u != 50 {
		t.Fatalf("re-enabled limit used = %d; want 50 (counters kept counting)", u)
	}
	noDrift(t, tr)
}

func testReadYourWrites(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "1h"}, 1000)
	req := budget.Request{Key: "k", Provider: "p", Model: "m"}
	Used(t, tr, req, T0, l.ID) // warm the cache
	for i := range 20 {
		if err := tr.Record(ctx, ev(fmt.Sprint(i), "k", "p", "m", 5, 0, T0)); err != nil {
			t.Fatal(err)
		}
	}
	if u, _ := Used(t, tr, req, T0, l.ID); u != 100 {
		t.Fatalf("before flush used = %d; want 100 (own queued usage)", u)
	}
	if _, err := tr.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if u, _ := Used(t, tr, req, T0, l.ID); u != 100 {
		t.Fatalf("after flush used = %d; want 100 (counted once)", u)
	}
	noDrift(t, tr)
}

func testOtherProcess(t *testing.T, newDB NewDB) {
	open := newDB(t)
	ca, cb := NewClock(T0), NewClock(T0)
	a := NewTracker(t, open(), ca, time.Second)
	b := NewTracker(t, open(), cb, time.Second)
	l := SetLimit(t, b, budget.LimitSpec{Key: "k", Window: "daily"}, 1000)
	req := budget.Request{Key: "k", Provider: "p", Model: "m"}
	Used(t, a, req, T0, l.ID) // a caches the limit and its counter
	RecordSync(t, b, ev("1", "k", "p", "m", 300, 0, T0))
	if u, _ := Used(t, a, req, T0, l.ID); u != 0 {
		t.Fatalf("within the refresh interval a sees %d; want its cached 0", u)
	}
	ca.Advance(time.Second)
	if u, _ := Used(t, a, req, T0, l.ID); u != 300 {
		t.Fatalf("after the refresh interval a sees %d; want 300", u)
	}
	// A limit change through b is enforced by a once its cache refreshes.
	SetLimit(t, b, budget.LimitSpec{Key: "k", Window: "daily"}, 200)
	ca.Advance(time.Second)
	d, err := a.CheckAt(ctx, req, T0)
	if err != nil || d.Allowed || d.Breach == nil || d.Breach.Limit.Max != 200 {
		t.Fatalf("a's check after b lowered the limit = %+v, %v; want refused by limit 200", d.Breach, err)
	}
	// A new limit created by b is counted by a's writer at once.
	n := SetLimit(t, b, budget.LimitSpec{Key: "k", Scope: "model", ScopeValue: "m", Window: "1h"}, 50)
	RecordSync(t, a, ev("2", "k", "p", "m", 7, 0, T0))
	if u, _ := Used(t, b, req, T0, n.ID); u != 307 {
		t.Fatalf("new limit used = %d; want 307 (seeded 300 + 7)", u)
	}
	noDrift(t, a)
}

func testLimitIdentity(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	a := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "60m"}, 100)
	b := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "1h"}, 200)
	if a.ID != b.ID || b.Max != 200 {
		t.Fatalf("60m and 1h made two limits (%s, %s); want one updated in place", a.ID, b.ID)
	}
	rt := "09:30"
	c, _, err := tr.SetLimit(ctx, budget.LimitSpec{ID: "day", Key: "k", Window: "daily", ResetTime: &rt, Max: ptr(int64(5))})
	if err != nil {
		t.Fatal(err)
	}
	// An update keeps what its fields do not mention.
	tz := "Europe/Berlin"
	c2, created, err := tr.SetLimit(ctx, budget.LimitSpec{ID: "day", Key: "k", Window: "daily", Timezone: &tz})
	if err != nil || created || c2.Max != 5 || c2.Window.ResetTimeString() != "09:30" || c2.Window.ZoneName() != tz {
		t.Fatalf("update = %+v created=%v err=%v; want max 5, 09:30, %s kept", c2, created, err, tz)
	}
	_ = c
	for _, bad := range []budget.LimitSpec{
		{ID: "day", Key: "k", Window: "weekly", Max: ptr(int64(1))}, // existing id, other window
		{ID: "new", Key: "k", Window: "daily", Max: ptr(int64(1))},  // new id, existing tuple
		{ID: "x", Key: "k", Window: "2h"},                           // create without a limit
		{Key: "k", Window: "1h", Max: ptr(int64(0))},                // limit 0
		{Key: "k", Scope: "global", ScopeValue: "v", Window: "1h", Max: ptr(int64(1))},
	} {
		if _, _, err := tr.SetLimit(ctx, bad); !errors.Is(err, budget.ErrInvalid) {
			t.Errorf("SetLimit(%+v) = %v; want ErrInvalid", bad, err)
		}
	}
	ls, err := tr.Limits(ctx, "k")
	if err != nil || len(ls) != 2 {
		t.Fatalf("limits = %+v, %v; want 2 (bad input wrote nothing)", ls, err)
	}
	if err := tr.DeleteLimit(ctx, "nope"); !errors.Is(err, budget.ErrNotFound) {
		t.Fatalf("DeleteLimit(unknown) = %v; want ErrNotFound", err)
	}
}

func ptr[T any](v T) *T { return &v }

func testVerifyMixed(t *testing.T, newDB NewDB) {
	tr, _, open := setup(t, newDB)
	b := NewTracker(t, open(), NewClock(T0), 0)
	keys := []string{"k1", "k2", "k3"}
	provs := []string{"openai", "anthropic"}
	models := []string{"a", "b", "c"}
	for _, k := range keys {
		SetLimit(t, tr, budget.LimitSpec{Key: k, Window: "1h"}, 1<<40)
		SetLimit(t, tr, budget.LimitSpec{Key: k, Window: "daily", Metric: "input"}, 1<<40)
		SetLimit(t, tr, budget.LimitSpec{Key: k, Scope: "provider", ScopeValue: "openai", Window: "5m", Metric: "output"}, 1<<40)
		SetLimit(t, tr, budget.LimitSpec{Key: k, Scope: "model", ScopeValue: "b", Window: "weekly", Metric: "requests"}, 1<<40)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var evs []budget.Usage
	for i := range 600 {
		id := fmt.Sprint(i)
		if rng.IntN(10) == 0 && i > 0 {
			id = fmt.Sprint(rng.IntN(i)) // a duplicate
		}
		at := T0.Add(time.Duration(rng.IntN(3*3600)-3600) * time.Second) // late ones too
		evs = append(evs, budget.Usage{RequestID: id, Key: keys[rng.IntN(3)], Provider: provs[rng.IntN(2)],
			Model: models[rng.IntN(3)], Input: int64(rng.IntN(1000)), Output: int64(rng.IntN(100)),
			Reasoning: int64(rng.IntN(50)), At: at})
	}
	for i, e := range evs {
		w := tr
		if i%3 == 0 {
			w = b
		}
		if err := w.Record(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tr.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	noDrift(t, tr)
}

func testSaturation(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	l := SetLimit(t, tr, budget.LimitSpec{Key: "big", Window: "daily"}, budget.MaxTokens)
	other := SetLimit(t, tr, budget.LimitSpec{Key: "small", Window: "daily"}, 100)
	var evs []budget.Usage
	for i := range 1100 { // 1100 x (2^53-1) passes int64: the sum must saturate, not fail
		evs = append(evs, ev(fmt.Sprint(i), "big", "p", "m", budget.MaxTokens, 0, T0))
	}
	RecordSync(t, tr, evs...)
	RecordSync(t, tr, ev("x", "big", "p", "m", budget.MaxTokens, 0, T0)) // onto an existing row
	RecordSync(t, tr, ev("s", "small", "p", "m", 5, 0, T0))
	if u, _ := Used(t, tr, budget.Request{Key: "big"}, T0, l.ID); u != budget.MaxTokens {
		t.Fatalf("used = %d; want saturated at 2^53-1", u)
	}
	if u, _ := Used(t, tr, budget.Request{Key: "small"}, T0, other.ID); u != 5 {
		t.Fatalf("another key's usage behind the huge batch = %d; want 5 (the writer kept going)", u)
	}
	d, _ := tr.CheckAt(ctx, budget.Request{Key: "big"}, T0)
	if d.Allowed {
		t.Fatal("a saturated counter did not refuse")
	}
	noDrift(t, tr)
}

// testRolloverFirstRow: the first counter row a limit ever gets is "later
// than every window it has a row for", so creating it logs a rollover when
// the window before had usage (contract section 8).
func testRolloverFirstRow(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	RecordSync(t, tr, ev("old", "k", "p", "m", 40, 0, T0.Add(-time.Hour))) // before the limit exists
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "1h"}, 1000)
	RecordSync(t, tr, ev("new", "k", "p", "m", 1, 0, T0))
	r, err := tr.Inspect(ctx, "k", T0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Rollovers) != 1 || r.Rollovers[0].LimitID != l.ID || r.Rollovers[0].PrevUsed != 40 ||
		!r.Rollovers[0].PrevWindowStart.Equal(T0.Add(-time.Hour)) {
		t.Fatalf("rollovers = %+v; want one into %v with prev_used 40", r.Rollovers, T0)
	}
}

// testReadsWriteNothing: Check and Inspect of cold windows compute the seed
// without storing a counter row, a rollover or anything else.
func testReadsWriteNothing(t *testing.T, newDB NewDB) {
	tr, _, open := setup(t, newDB)
	RecordSync(t, tr, ev("a", "k", "p", "m", 40, 0, T0.Add(-time.Hour)), ev("b", "k", "p", "m", 5, 0, T0))
	SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "1h"}, 1000)
	s := open()
	reader := NewTracker(t, s, NewClock(T0), 0)
	for _, at := range []time.Time{T0, T0.Add(time.Hour), T0.Add(-time.Hour)} {
		if d, err := reader.CheckAt(ctx, budget.Request{Key: "k", Estimate: tokens(1)}, at); err != nil || len(d.Limits) != 1 {
			t.Fatalf("CheckAt(%v) = %+v, %v", at, d, err)
		}
		if _, err := reader.Inspect(ctx, "", at, 10); err != nil {
			t.Fatal(err)
		}
	}
	var rows []budget.CounterRow
	var rolls []budget.Rollover
	err := s.View(ctx, func(tx budget.Tx) error {
		var err error
		h := historyRole(t, tx)
		if rows, err = h.CounterRows(ctx); err != nil {
			return err
		}
		rolls, err = h.Rollovers(ctx, "", 10)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 0 || len(rolls) != 0 {
		t.Fatalf("reads stored counter rows %+v and rollovers %+v; want none", rows, rolls)
	}
}
