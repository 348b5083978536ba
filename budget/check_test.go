package budget_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/budget/internal/memstore"
)

// checkTracker is a tracker on memstore whose cache stays warm for the
// test, with key k's limits: a daily global one, a provider one on openai
// and a model one on gpt-4o, and a per-user one for user "ann".
func checkTracker(t *testing.T) *budget.Tracker {
	t.Helper()
	ctx := context.Background()
	cfg := budget.DefaultConfig()
	cfg.SweepInterval = -1
	cfg.RefreshInterval = time.Hour
	tr, err := budget.New(ctx, memstore.New(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close(context.Background()) })
	max := int64(1000)
	for _, s := range []budget.LimitSpec{
		{ID: "day", Key: "k", Window: "daily"},
		{ID: "prov", Key: "k", Scope: "provider", ScopeValue: "openai", Window: "1h"},
		{ID: "model", Key: "k", Scope: "model", ScopeValue: "gpt-4o", Window: "1m"},
		{ID: "ann", Key: "k", Scope: "user", ScopeValue: "ann", Window: "daily"},
	} {
		s.Max = &max
		if _, _, err := tr.SetLimit(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	return tr
}

func limitIDs(d budget.Decision) string {
	var ids []string
	for _, s := range d.Limits {
		ids = append(ids, s.Limit.ID)
	}
	return strings.Join(ids, ",")
}

// The limits a check decides on follow the request's provider, model and
// user however many routes a key's requests take and in whatever order:
// a key remembers a few, and the others are worked out again.
func TestCheckRoutesFollowProviderModelAndUser(t *testing.T) {
	tr := checkTracker(t)
	ctx := context.Background()
	cases := []struct {
		provider, model, user string
		want                  string
	}{
		{"openai", "gpt-4o", "", "day,prov,model"},
		{"openai", "GPT-4o-2024-08-06", "", "day,prov,model"}, // normalised to gpt-4o
		{" openai ", " gpt-4o ", "", "day,prov,model"},        // trimmed
		{"openai", "gpt-4o", "ann", "day,prov,model,ann"},
		{"openai", "gpt-4o", " ann ", "day,prov,model,ann"},
		{"openai", "gpt-4o", "bob", "day,prov,model"},
		{"anthropic", "claude", "", "day"},
		{"anthropic", "gpt-4o", "", "day,model"},
		{"openai", "o1", "", "day,prov"},
		{"", "", "ann", "day,ann"},
		{"azure", "gpt-4o-mini", "", "day"},
	}
	for round := range 3 { // more pairs than a key remembers, again and again
		for _, c := range cases {
			d, err := tr.Check(ctx, budget.Request{Key: "k", Provider: c.provider, Model: c.model, User: c.user})
			if err != nil {
				t.Fatalf("round %d: Check(%q, %q, %q): %v", round, c.provider, c.model, c.user, err)
			}
			if got := limitIDs(d); got != c.want {
				t.Errorf("round %d: Check(%q, %q, %q) decides on %s; want %s", round, c.provider, c.model, c.user, got, c.want)
			}
		}
	}
	// A key sent with spaces is the same key.
	if d, err := tr.Check(ctx, budget.Request{Key: " k ", Provider: "openai", Model: "gpt-4o"}); err != nil || limitIDs(d) != "day,prov,model" {
		t.Errorf("Check(\" k \") = %s, %v; want day,prov,model", limitIDs(d), err)
	}
}

// Names are validated once per key and route, but a bad name is refused
// on a warm key as on a cold one, naming the field; so are a bad user and
// a bad estimate, which a route cannot remember.
func TestCheckWarmKeyStillRefusesBadNames(t *testing.T) {
	tr := checkTracker(t)
	ctx := context.Background()
	good := budget.Request{Key: "k", Provider: "openai", Model: "gpt-4o"}
	for range 2 { // warm: the key and its route are cached
		if _, err := tr.Check(ctx, good); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		mutate func(*budget.Request)
		field  string
	}{
		{func(r *budget.Request) { r.Model = "gpt\x00-4o" }, "model"},
		{func(r *budget.Request) { r.Provider = "open\x07ai" }, "provider"},
		{func(r *budget.Request) { r.User = "ann\x1f" }, "user"},
		{func(r *budget.Request) { r.Estimate.Input = -1 }, "estimate.input"},
		{func(r *budget.Request) { r.Key = "" }, "key"},
		{func(r *budget.Request) { r.Key = "k\x00" }, "key"},
	} {
		req := good
		c.mutate(&req)
		for range 2 {
			if _, err := tr.Check(ctx, req); err == nil || !strings.Contains(err.Error(), c.field) {
				t.Errorf("Check(%+v) = %v; want an error naming %s", req, err, c.field)
			}
		}
	}
}

// A key's limit slot keeps the counter of the window its last check
// found, so the next check in that window takes it from there, not from
// a second lookup in the counter cache; a check in a later window moves
// the slot on to that window's counter.
func TestSlotKeepsItsWindowsCounter(t *testing.T) {
	tr := checkTracker(t)
	ctx := context.Background()
	req := budget.Request{Key: "k", Provider: "openai", Model: "gpt-4o"}
	now := time.Date(2026, 12, 7, 12, 30, 30, 0, time.UTC) // mid-minute: a millisecond on is the same model window
	buf := make([]budget.Status, 0, 8)
	if _, err := tr.CheckInto(ctx, req, now, buf); err != nil {
		t.Fatal(err)
	}
	slot, cached := budget.SlotCounter(tr, "k", "model")
	if slot == nil || slot != cached {
		t.Fatalf("after a check the slot holds counter %p, the cache %p; want the cache's", slot, cached)
	}
	if _, err := tr.CheckInto(ctx, req, now.Add(time.Millisecond), buf); err != nil {
		t.Fatal(err)
	}
	if again, _ := budget.SlotCounter(tr, "k", "model"); again != slot {
		t.Fatalf("a second check in the window left counter %p in the slot; want %p", again, slot)
	}
	// The model limit's window is a minute: two minutes on is another.
	if _, err := tr.CheckInto(ctx, req, now.Add(2*time.Minute), buf); err != nil {
		t.Fatal(err)
	}
	next, cached := budget.SlotCounter(tr, "k", "model")
	if next == nil || next == slot || next != cached || next.Start() <= slot.Start() {
		t.Fatalf("after a check in a later window the slot holds %p, the cache %p; want the later window's, not %p", next, cached, slot)
	}
}

// The window a limit's definition remembers is shared by every key with
// the definition: a check about another day, or usage of a request that
// began yesterday, must leave it on the day the tracker's clock is in,
// or every current check on those keys redoes the calendar arithmetic.
func TestWindowMemoFollowsTheTrackersClock(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2026, 12, 7, 12, 30, 30, 0, time.UTC)
	tr := storeTracker(t, memstore.New(), func(c *budget.Config) { c.Now = func() time.Time { return at } })
	max := int64(1000)
	if _, _, err := tr.SetLimit(ctx, budget.LimitSpec{ID: "day", Key: "k", Window: "daily", Max: &max}); err != nil {
		t.Fatal(err)
	}
	today := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC).UnixNano()
	memo := func(step string) {
		t.Helper()
		if start, _, ok := budget.WindowMemo(tr, "k", "day"); !ok || start != today {
			t.Fatalf("after %s the memo starts at %v (set %v); want the clock's day, %v", step, time.Unix(0, start).UTC(), ok, time.Unix(0, today).UTC())
		}
	}
	req := budget.Request{Key: "k", Provider: "openai", Model: "gpt-4o"}
	if _, err := tr.CheckAt(ctx, req, at); err != nil {
		t.Fatal(err)
	}
	memo("a check now")
	if _, err := tr.CheckAt(ctx, req, at.Add(48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	memo("a check two days ahead")
	if _, err := tr.RecordSync(ctx, budget.Usage{Key: "k", Provider: "openai", Model: "gpt-4o", Input: 1, At: at.Add(-25 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Record(ctx, budget.Usage{Key: "k", Provider: "openai", Model: "gpt-4o", Input: 1, At: at.Add(-25 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	memo("usage from yesterday")
	// Record reads the clock only for an event without its instant; that
	// clock's window is remembered too (a limit no check has decided yet).
	if _, _, err := tr.SetLimit(ctx, budget.LimitSpec{ID: "mini", Key: "k", Scope: "model", ScopeValue: "gpt-4o-mini", Window: "daily", Max: &max}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.CheckAt(ctx, req, at); err != nil { // caches the key's entry, not the mini limit's window
		t.Fatal(err)
	}
	if _, _, ok := budget.WindowMemo(tr, "k", "mini"); ok {
		t.Fatal("a check on gpt-4o remembered the gpt-4o-mini limit's window")
	}
	if err := tr.Record(ctx, budget.Usage{Key: "k", Provider: "openai", Model: "gpt-4o-mini", Input: 1}); err != nil {
		t.Fatal(err)
	}
	if start, _, ok := budget.WindowMemo(tr, "k", "mini"); !ok || start != today {
		t.Fatalf("after usage without its instant the mini limit's memo starts at %v (set %v); want %v", time.Unix(0, start).UTC(), ok, time.Unix(0, today).UTC())
	}
}
