package budget_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/budget/internal/memstore"
)

// Keys under the same default limit, or given the same limits of their
// own, share one definition of each and one set of routes in the cache,
// and each still sees its own limit, subject and counter.
func TestKeysWithTheSameLimitsShareTheirDefinitions(t *testing.T) {
	ctx := context.Background()
	tr := storeTracker(t, memstore.New(), func(c *budget.Config) { c.RefreshInterval = time.Hour })
	max := int64(100)
	specs := []budget.LimitSpec{{ID: "dflt", Default: true, Window: "daily", Max: &max}}
	for _, k := range []string{"a", "b"} {
		specs = append(specs, budget.LimitSpec{ID: "own-" + k, Key: k, Scope: "model", ScopeValue: "gpt-4o", Window: "1h", Max: &max})
	}
	for _, s := range specs {
		if _, _, err := tr.SetLimit(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Date(2026, 3, 2, 9, 30, 0, 0, time.UTC)
	if _, err := tr.RecordSync(ctx, budget.Usage{Key: "a", Provider: "openai", Model: "gpt-4o", Input: 7, At: at}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} {
		d, err := tr.CheckAt(ctx, budget.Request{Key: k, Provider: "openai", Model: "gpt-4o"}, at)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int64{"a": 7, "b": 0}[k]
		if len(d.Limits) != 2 {
			t.Fatalf("key %s: %d limits; want the default and its own", k, len(d.Limits))
		}
		dl, own := d.Limits[0], d.Limits[1]
		if dl.Limit.ID != "dflt" || dl.Limit.Subject != k || dl.Limit.Key != "" || dl.Used != want {
			t.Errorf("key %s: default %s subject %q key %q used %d; want dflt for %s, used %d", k, dl.Limit.ID, dl.Limit.Subject, dl.Limit.Key, dl.Used, k, want)
		}
		if own.Limit.ID != "own-"+k || own.Limit.Key != k || own.Limit.Subject != "" || own.Used != want {
			t.Errorf("key %s: own %s key %q subject %q used %d; want own-%s of %s, used %d", k, own.Limit.ID, own.Limit.Key, own.Limit.Subject, own.Used, k, k, want)
		}
	}
	if defs, routes := budget.SharedEntries(tr, "a", "b"); !defs || !routes {
		t.Errorf("keys a and b share definitions %v, routes %v; want both", defs, routes)
	}
}

// The writer's memory of which windows have rows, and of each counter's
// latest row, stays within the counter cache's size however many keys
// record: 400 keys' events through a tracker with a 50-counter cache.
func TestWriterMemoryBoundedByTheCounterCache(t *testing.T) {
	ctx := context.Background()
	tr := storeTracker(t, memstore.New(), func(c *budget.Config) { c.CounterCacheSize = 50; c.LimitCacheSize = 20 })
	max := int64(1 << 40)
	for _, w := range []string{"daily", "1h"} {
		if _, _, err := tr.SetLimit(ctx, budget.LimitSpec{ID: "dflt-" + w, Default: true, Window: w, Max: &max}); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Date(2026, 3, 2, 9, 30, 0, 0, time.UTC)
	for k := range 400 {
		key := "key-" + strconv.Itoa(k)
		if k%2 == 0 { // half checked first, so their counters are cached
			if _, err := tr.CheckAt(ctx, budget.Request{Key: key, Provider: "openai", Model: "gpt-4o"}, at); err != nil {
				t.Fatal(err)
			}
		}
		if err := tr.Record(ctx, budget.Usage{Key: key, Provider: "openai", Model: "gpt-4o", Input: 1, At: at}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tr.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if stored, latest := budget.WriterMemory(tr); stored > 50 || latest > 0 {
		t.Errorf("after 800 windows the writer keeps %d stored marks and %d latest rows; want at most 50 and none (no window stays in memory)", stored, latest)
	}
	// What it forgot costs a read, never a count: each key's second event
	// lands on its row.
	for k := range 400 {
		key := "key-" + strconv.Itoa(k)
		if err := tr.Record(ctx, budget.Usage{Key: key, Provider: "openai", Model: "gpt-4o", Input: 2, At: at}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tr.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Windows whose rows it knew of were put in memory unread (recalled):
	// they leave it with the batch too.
	if now, _ := budget.WriterWindows(tr); now != 0 {
		t.Errorf("after a batch over 800 stored windows the writer holds %d windows; want none", now)
	}
	tr.InvalidateLimits("")
	for _, k := range []int{0, 1, 398, 399} {
		d, err := tr.CheckAt(ctx, budget.Request{Key: "key-" + strconv.Itoa(k), Provider: "openai", Model: "gpt-4o"}, at)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range d.Limits {
			if st.Used != 3 {
				t.Errorf("key-%d %s: used %d; want 3", k, st.Limit.ID, st.Used)
			}
		}
	}
}

// An event and a reservation on a window whose row the writer knows
// exists, in one batch: the event puts it in memory unread, the
// reservation reads it over that. The window read stays in memory, hot
// (reservations decide on it), not dropped with the one it replaced.
func TestReservedWindowReadOverARecalledOneStays(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2026, 3, 2, 9, 30, 0, 0, time.UTC)
	tr := storeTracker(t, memstore.New(), func(c *budget.Config) {
		c.Now = func() time.Time { return at }
		c.BatchInterval = time.Hour // a batch closes when the reservation, waited on, joins it
	})
	max := int64(1 << 40)
	if _, _, err := tr.SetLimit(ctx, budget.LimitSpec{ID: "dflt", Default: true, Window: "daily", Max: &max}); err != nil {
		t.Fatal(err)
	}
	u := budget.Usage{Key: "k", Provider: "openai", Model: "gpt-4o", Input: 1, At: at}
	if _, err := tr.RecordSync(ctx, u); err != nil {
		t.Fatal(err)
	}
	if now, _ := budget.WriterWindows(tr); now != 0 {
		t.Fatalf("after one event the writer holds %d windows; want none", now)
	}
	if err := tr.Record(ctx, u); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Reserve(ctx, budget.Request{Key: "k", Provider: "openai", Model: "gpt-4o", Estimate: budget.Estimate{Tokens: 100}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if now, _ := budget.WriterWindows(tr); now != 1 {
		t.Errorf("after an event and a reservation on one window the writer holds %d windows; want the reserved one", now)
	}
	d, err := tr.CheckAt(ctx, budget.Request{Key: "k", Provider: "openai", Model: "gpt-4o"}, at)
	if err != nil || len(d.Limits) != 1 || d.Limits[0].Used != 2 || d.Limits[0].Reserved != 100 {
		t.Errorf("k: %+v, %v; want used 2, reserved 100", d.Limits, err)
	}
}

// dailyDefaultTracker is a Tracker on a memstore whose clock stands at the
// instant it returns, with one default daily limit no test reaches.
func dailyDefaultTracker(t *testing.T) (*budget.Tracker, time.Time) {
	t.Helper()
	at := time.Date(2026, 3, 2, 9, 30, 0, 0, time.UTC)
	tr := storeTracker(t, memstore.New(), func(c *budget.Config) { c.Now = func() time.Time { return at } })
	max := int64(1 << 40)
	if _, _, err := tr.SetLimit(context.Background(), budget.LimitSpec{ID: "dflt", Default: true, Window: "daily", Max: &max}); err != nil {
		t.Fatal(err)
	}
	return tr, at
}

// Go's maps keep their largest table, so the writer rebuilds its window
// maps once its queue is empty after a burst: a reserved window it keeps
// survives the rebuild with its count and its hold, and the burst's
// windows, gone from memory, still count.
func TestWriterMapsRebuiltAfterABurst(t *testing.T) {
	ctx := context.Background()
	tr, at := dailyDefaultTracker(t)
	res, err := tr.Reserve(ctx, budget.Request{Key: "hot", Provider: "openai", Model: "gpt-4o", Estimate: budget.Estimate{Tokens: 100}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	burst := make([]budget.Usage, 3000)
	for k := range burst {
		burst[k] = budget.Usage{Key: "key-" + strconv.Itoa(k), Provider: "openai", Model: "gpt-4o", Input: 1, At: at}
	}
	burst = append(burst, budget.Usage{Key: "hot", Provider: "openai", Model: "gpt-4o", Input: 5, At: at})
	if _, err := tr.RecordSync(ctx, burst...); err != nil {
		t.Fatal(err)
	}
	if now, since := budget.WriterWindows(tr); now != 1 || since != 0 {
		t.Errorf("after a burst of 3,001 windows the writer holds %d windows, %d since its maps were rebuilt; want the reserved one, rebuilt (0)", now, since)
	}
	d, err := tr.CheckAt(ctx, budget.Request{Key: "hot", Provider: "openai", Model: "gpt-4o"}, at)
	if err != nil || len(d.Limits) != 1 || d.Limits[0].Used != 5 || d.Limits[0].Reserved != 100 {
		t.Fatalf("hot before its commit: %+v, %v; want used 5, reserved 100", d.Limits, err)
	}
	if _, err := tr.Commit(ctx, res.ID, budget.Usage{Provider: "openai", Model: "gpt-4o", Input: 40}); err != nil {
		t.Fatal(err)
	}
	tr.InvalidateLimits("")
	for _, c := range []struct {
		key  string
		want int64
	}{{"hot", 45}, {"key-0", 1}, {"key-2999", 1}} {
		d, err := tr.CheckAt(ctx, budget.Request{Key: c.key, Provider: "openai", Model: "gpt-4o"}, at)
		if err != nil || len(d.Limits) != 1 || d.Limits[0].Used != c.want || d.Limits[0].Reserved != 0 {
			t.Errorf("%s: %+v, %v; want used %d, nothing reserved", c.key, d.Limits, err, c.want)
		}
	}
}

// What a batch holds while it is written grows with its keys: events over
// many keys queued while the writer is busy are written in batches of at
// most MaxBatchKeys keys, every one of them; events over few keys still
// share one batch.
func TestBatchesBoundedByTheirKeys(t *testing.T) {
	for _, tc := range []struct {
		name     string
		keys     int
		min, max int64 // batches: the held one, the queued events', and the flush's if it came late
	}{
		{"many keys", 2*budget.MaxBatchKeys + 10, 1 + 3, 1 + 3 + 1},
		{"few keys", 10, 1 + 1, 1 + 1 + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := memstore.New()
			tr := storeTracker(t, s, func(c *budget.Config) { c.QueueSize, c.BatchSize = 1<<16, 1<<16 })
			at := time.Date(2026, 3, 2, 9, 30, 0, 0, time.UTC)
			g := s.Gate()
			if err := tr.Record(ctx, budget.Usage{Key: "first", Provider: "openai", Model: "gpt-4o", Input: 1, At: at}); err != nil {
				t.Fatal(err)
			}
			<-g.Reached() // the writer holds its first batch: the rest queue
			const events = 2*budget.MaxBatchKeys + 10
			for i := range events {
				key := "key-" + strconv.Itoa(i%tc.keys)
				if err := tr.Record(ctx, budget.Usage{Key: key, Provider: "openai", Model: "gpt-4o", Input: 1, At: at}); err != nil {
					t.Fatal(err)
				}
			}
			g.Release()
			res, err := tr.Flush(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st := tr.Stats(); res.Written != events+1 || st.Batches < tc.min || st.Batches > tc.max {
				t.Errorf("%d events over %d keys: %d written in %d batches; want %d in %d to %d", events+1, tc.keys, res.Written, st.Batches, events+1, tc.min, tc.max)
			}
		})
	}
}

// A writer whose windows stay (each holds a reservation) does not rebuild
// its maps after every batch: copying thousands of windows a batch cost
// the 1-goroutine leased pairs 14,000 -> 600 a second. Its maps are rebuilt
// only once they hold a small part of what they grew to.
func TestWriterMapsKeptWhileTheirWindowsStay(t *testing.T) {
	ctx := context.Background()
	tr, at := dailyDefaultTracker(t)
	const keys = 1200
	for k := range keys {
		if _, err := tr.Reserve(ctx, budget.Request{Key: "key-" + strconv.Itoa(k), Provider: "openai", Model: "gpt-4o", Estimate: budget.Estimate{Tokens: 1}}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tr.RecordSync(ctx, budget.Usage{Key: "key-0", Provider: "openai", Model: "gpt-4o", Input: 1, At: at}); err != nil {
		t.Fatal(err)
	}
	if now, since := budget.WriterWindows(tr); now != keys || since < keys {
		t.Errorf("with %d reserved windows the writer holds %d windows, %d since its maps were rebuilt; want all %d, not rebuilt", keys, now, since, keys)
	}
}

// A key's events from several users in one batch, on limits with a
// counter per user and per tag value: the writer notes a key's window once
// for its events in a row from one user or value (what it sizes the
// batch's counters by), and each user's and value's window still counts
// exactly its own events.
func TestEachUsersWindowCountsItsEventsOfABatch(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2026, 3, 2, 9, 30, 0, 0, time.UTC)
	tr := storeTracker(t, memstore.New(), func(c *budget.Config) { c.Now = func() time.Time { return at } })
	max := int64(1 << 40)
	for _, s := range []budget.LimitSpec{{Key: "k", Scope: "user", ScopeValue: budget.AllUsers, Window: "daily", Max: &max},
		{Key: "k", Scope: "tag", ScopeValue: "team=" + budget.AllValues, Window: "daily", Max: &max}} {
		if _, _, err := tr.SetLimit(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	ev := func(user, team string, input int64) budget.Usage {
		return budget.Usage{Key: "k", User: user, Tags: budget.Tags("team=" + team), Provider: "openai", Model: "gpt-4o", Input: input, At: at}
	}
	if _, err := tr.RecordSync(ctx, ev("alice", "a", 1), ev("alice", "a", 2), ev("bob", "a", 4), ev("alice", "b", 8), ev("bob", "b", 16)); err != nil {
		t.Fatal(err)
	}
	tr.InvalidateLimits("")
	for _, c := range []struct {
		user, team     string
		byUser, byTeam int64
	}{{"alice", "a", 11, 7}, {"bob", "b", 20, 24}} {
		d, err := tr.CheckAt(ctx, budget.Request{Key: "k", User: c.user, Tags: budget.Tags("team=" + c.team), Provider: "openai", Model: "gpt-4o"}, at)
		if err != nil || len(d.Limits) != 2 {
			t.Fatalf("%s, team %s: %+v, %v; want 2 limits", c.user, c.team, d.Limits, err)
		}
		for _, st := range d.Limits {
			want := c.byUser
			if st.Limit.Scope == budget.ScopeTag {
				want = c.byTeam
			}
			if st.Used != want {
				t.Errorf("%s, team %s, limit %s: used %d; want %d", c.user, c.team, st.Limit.ScopeValue, st.Used, want)
			}
		}
	}
}

// A wrong rule for skipping windows a key's earlier event already planned
// leaves a window unloaded at decide. That try fails, and the next plans
// every event's windows afresh: the batch lands, counted right, instead of
// the writer retrying the same plan forever while every later event waits.
func TestWriterRecoversFromAWindowItsPlanSkipped(t *testing.T) {
	at := time.Date(2026, 3, 2, 9, 30, 0, 0, time.UTC)
	tr := storeTracker(t, memstore.New(), func(c *budget.Config) { c.Now = func() time.Time { return at } })
	max := int64(1 << 40)
	if _, _, err := tr.SetLimit(context.Background(), budget.LimitSpec{Key: "k", Scope: "user", ScopeValue: budget.AllUsers, Window: "daily", Max: &max}); err != nil {
		t.Fatal(err)
	}
	defer budget.SetPlanFault(tr)()
	// A guard, not a wait: without the recovery RecordSync never returns.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ev := func(user string, input int64) budget.Usage {
		return budget.Usage{Key: "k", User: user, Provider: "openai", Model: "gpt-4o", Input: input, At: at}
	}
	if _, err := tr.RecordSync(ctx, ev("alice", 1), ev("bob", 2), ev("alice", 4)); err != nil {
		t.Fatalf("RecordSync with a wrong skip rule: %v; want the batch landed on the next try", err)
	}
	if st := tr.Stats(); st.Failures == 0 {
		t.Errorf("stats %+v: want the try that found the window unloaded counted as failed", st)
	}
	tr.InvalidateLimits("")
	for user, want := range map[string]int64{"alice": 5, "bob": 2} {
		d, err := tr.CheckAt(context.Background(), budget.Request{Key: "k", User: user, Provider: "openai", Model: "gpt-4o"}, at)
		if err != nil || len(d.Limits) != 1 || d.Limits[0].Used != want {
			t.Errorf("%s: %+v, %v; want used %d", user, d.Limits, err, want)
		}
	}
}
