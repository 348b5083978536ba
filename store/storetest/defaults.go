package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func init() {
	extra = append(extra,
		suiteCase{"DefaultLimitsCountPerKey", testDefaultsPerKey},
		suiteCase{"DefaultLimitsExactPerKey", testDefaultsExact},
	)
}

func statusOf(t *testing.T, tr *budget.Tracker, req budget.Request, at time.Time, id string) (budget.Status, bool) {
	t.Helper()
	d, err := tr.CheckAt(ctx, req, at)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range d.Limits {
		if s.Limit.ID == id {
			return s, true
		}
	}
	return budget.Status{}, false
}

// A default limit binds every key without an own limit of the same shape,
// each key with its own counter (seeded from that key's history); an own
// enabled limit of the same scope, value, metric and window replaces it.
func testDefaultsPerKey(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	at := T0.Add(time.Minute)
	RecordSync(t, tr, ev("a1", "a", "p", "m", 30, 0, at)) // before the default exists
	def := SetLimit(t, tr, budget.LimitSpec{Default: true, Window: "daily"}, 100)
	if !def.IsDefault() || def.Key != "" {
		t.Fatalf("default limit = %+v; want no key", def)
	}
	RecordSync(t, tr, ev("a2", "a", "p", "m", 50, 0, at), ev("b1", "b", "p", "m", 5, 0, at))
	if s, ok := statusOf(t, tr, budget.Request{Key: "a"}, at, def.ID); !ok || s.Used != 80 || s.Limit.Subject != "a" {
		t.Fatalf("default for a = %+v (applies %v); want used 80 (seeded 30 + 50), subject a", s, ok)
	}
	if s, _ := statusOf(t, tr, budget.Request{Key: "b"}, at, def.ID); s.Used != 5 {
		t.Fatalf("default for b used %d; want 5: its own counter", s.Used)
	}
	if s, ok := statusOf(t, tr, budget.Request{Key: "never-seen"}, at, def.ID); !ok || s.Used != 0 || s.Remaining() != 100 {
		t.Fatalf("default for an unseen key = %+v (applies %v); want it to apply, unused", s, ok)
	}
	var ex *budget.ExceededError
	if _, err := tr.Reserve(ctx, budget.Request{Key: "a", Estimate: tokens(30)}, time.Minute); !errors.As(err, &ex) || ex.Decision.Breach.Limit.ID != def.ID {
		t.Fatalf("Reserve 30 for a (80 of 100 used) = %v; want refused by the default", err)
	}
	if _, err := tr.Reserve(ctx, budget.Request{Key: "b", Estimate: tokens(90)}, time.Minute); err != nil {
		t.Fatalf("Reserve 90 for b (5 of 100 used) = %v; want admitted", err)
	}
	// An own limit of the same shape overrides; another shape does not.
	own := SetLimit(t, tr, budget.LimitSpec{Key: "c", Window: "daily"}, 1000)
	other := SetLimit(t, tr, budget.LimitSpec{Key: "d", Window: "1h"}, 1000)
	off := SetLimit(t, tr, budget.LimitSpec{Key: "e", Window: "daily", Enabled: ptr(false)}, 1000)
	if _, ok := statusOf(t, tr, budget.Request{Key: "c"}, at, def.ID); ok {
		t.Fatal("the default applies to c, which has an own daily tokens limit")
	}
	if _, ok := statusOf(t, tr, budget.Request{Key: "c"}, at, own.ID); !ok {
		t.Fatal("c's own limit does not apply")
	}
	for _, k := range []string{"d", "e"} {
		if _, ok := statusOf(t, tr, budget.Request{Key: k}, at, def.ID); !ok {
			t.Fatalf("the default does not apply to %s (own limits %s, %s do not override it)", k, other.ID, off.ID)
		}
	}
	rep, err := tr.Inspect(ctx, "a", at, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Limits) != 1 || rep.Limits[0].Limit.ID != def.ID || rep.Limits[0].Used != 80 {
		t.Fatalf("Inspect a = %+v; want the default with a's usage", rep.Limits)
	}
	noDrift(t, tr)
}

// Reservations against a default limit are exact per key across two
// handles: each key admits floor(limit / estimate) on its own counter.
func testDefaultsExact(t *testing.T, newDB NewDB) {
	a, b, _ := twoHandles(t, newDB)
	SetLimit(t, a, budget.LimitSpec{Default: true, Window: "1h"}, 1000)
	keys := []string{"x", "y"}
	rs := reserveAll(t, a, b, 64, func(i int) (budget.Request, budget.ReserveOptions) {
		return budget.Request{Key: keys[i/32], Estimate: tokens(70)}, budget.ReserveOptions{TTL: time.Minute}
	})
	for i, k := range keys {
		if n := admitted(rs[32*i : 32*i+32]); n != 1000/70 {
			t.Errorf("key %s admitted %d; want exactly %d on its own counter", k, n, 1000/70)
		}
	}
}
