package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func init() {
	extra = append(extra,
		suiteCase{"CacheAgeAcrossClockSteps", testCacheClockSteps},
		suiteCase{"ClockAheadKeepsExpiredCommittable", testClockAheadKeepsExpired},
	)
}

// testCacheClockSteps: a's clock steps (an NTP step, a VM restore, a
// manual fix) after it cached a key's limit and counter; b, another
// process, then records usage and raises the limit. Whichever way the
// clock moved, a must see b's writes once a refresh interval has passed on
// its clock after the step, and a cache loaded after the step must serve
// again within the interval.
func testCacheClockSteps(t *testing.T, newDB NewDB) {
	at1030 := time.Date(2026, 3, 2, 10, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		step time.Duration // a's clock after its first check
		wait time.Duration // then this much later a checks again
		seen bool          // whether that check must see b's writes
	}{
		{"no step, within the interval", 0, 500 * time.Millisecond, false},
		{"no step, after the interval", 0, 2 * time.Second, true},
		{"back 2h", -2 * time.Hour, 2 * time.Second, true},
		{"back 2h, at once", -2 * time.Hour, 0, true},
		{"back 1s", -time.Second, 2 * time.Second, true},
		{"back 300ms", -300 * time.Millisecond, 0, true},
		{"forward 2h", 2 * time.Hour, 2 * time.Second, true},
		{"forward 400ms, within the interval", 400 * time.Millisecond, 500 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			open := newDB(t)
			ca, cb := NewClock(at1030), NewClock(at1030)
			a := NewTracker(t, open(), ca, time.Second)
			b := NewTracker(t, open(), cb, time.Second)
			l := SetLimit(t, b, budget.LimitSpec{ID: "day", Key: "k", Window: "daily"}, 1000)
			req := budget.Request{Key: "k", Provider: "p", Model: "m"}
			check := func() (int64, int64) {
				t.Helper()
				d, err := a.Check(context.Background(), req)
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				for _, s := range d.Limits {
					if s.Limit.ID == l.ID {
						return s.Used, s.Limit.Max
					}
				}
				t.Fatalf("limit %s not applicable (limits %v)", l.ID, d.Limits)
				return 0, 0
			}
			if u, m := check(); u != 0 || m != 1000 {
				t.Fatalf("first check: used %d max %d; want 0, 1000", u, m)
			}
			ca.Advance(tc.step)
			RecordSync(t, b, ev("r1", "k", "p", "m", 900, 0, at1030))
			SetLimit(t, b, budget.LimitSpec{ID: "day", Key: "k", Window: "daily"}, 5000)
			ca.Advance(tc.wait)
			u, m := check()
			want := [2]int64{0, 1000}
			if tc.seen {
				want = [2]int64{900, 5000}
			}
			if u != want[0] || m != want[1] {
				t.Fatalf("a's check %v after a %v step: used %d max %d; want used %d max %d",
					tc.wait, tc.step, u, m, want[0], want[1])
			}
			if !tc.seen {
				return
			}
			// A cache loaded after the step serves again: b's next write
			// stays unseen within the interval, and is seen after it.
			RecordSync(t, b, ev("r2", "k", "p", "m", 50, 0, at1030))
			ca.Advance(500 * time.Millisecond)
			if u, _ := check(); u != 900 {
				t.Fatalf("within the interval after a reload a sees used %d; want its cached 900", u)
			}
			ca.Advance(time.Second)
			if u, _ := check(); u != 950 {
				t.Fatalf("after the interval a sees used %d; want 950", u)
			}
		})
	}
}

// testClockAheadKeepsExpired: a reservation recovered as expired (neither
// committed nor charged) stays committable through a forward clock step
// beyond SettledRetention: its commit, once the clock is put right, still
// records the usage, marked expired. Rows settled long before on a clock
// that ran normally are still deleted.
func testClockAheadKeepsExpired(t *testing.T, newDB NewDB) {
	// c is the wall clock, mono the clock that cannot jump (Go's monotonic
	// one in production): time that passes moves both, a step only c.
	c, mono := NewClock(T0), NewClock(T0)
	pass := func(d time.Duration) { c.Advance(d); mono.Advance(d) }
	cfg := budget.DefaultConfig()
	cfg.Now = c.Now
	cfg.Elapsed = func() time.Duration { return mono.Now().Sub(T0) }
	cfg.SweepInterval = -1
	tr, err := budget.New(ctx, newDB(t)(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close(context.Background()) })
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "daily"}, 1000)
	req := budget.Request{Key: "k", Provider: "p", Model: "m", Estimate: tokens(100)}
	old, err := tr.Reserve(ctx, req, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Commit(ctx, old.ID, budget.Usage{Input: 1}); err != nil {
		t.Fatal(err)
	}
	r, err := tr.Reserve(ctx, req, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	pass(2 * time.Minute)
	if res, err := tr.Recover(ctx, c.Now()); err != nil || res.ReleasedReservations != 1 {
		t.Fatalf("Recover after expiry = %+v, %v; want 1 released", res, err)
	}
	back := c.Now()
	c.Advance(3 * 24 * time.Hour) // the clock is set days ahead
	if _, err := tr.Recover(ctx, c.Now()); err != nil {
		t.Fatalf("Recover with the clock ahead: %v", err)
	}
	pass(time.Minute)
	c.Set(back.Add(time.Minute)) // and put right
	s, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 40, Output: 2})
	if err != nil || !s.Expired || s.Charged {
		t.Fatalf("late commit after the clock step = %+v, %v; want settled, expired, not charged", s, err)
	}
	if u, res := Used(t, tr, req, c.Now(), l.ID); u != 43 || res != 0 {
		t.Fatalf("used/reserved after the late commit = %d/%d; want 43/0", u, res)
	}
	// One that expires on a clock that runs normally, never committed.
	gone, err := tr.Reserve(ctx, req, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Time that passes still deletes settled rows after the retention.
	pass(2 * time.Minute)
	if res, err := tr.Recover(ctx, c.Now()); err != nil || res.ReleasedReservations != 1 {
		t.Fatalf("Recover = %+v, %v; want 1 released", res, err)
	}
	pass(25 * time.Hour)
	if _, err := tr.Recover(ctx, c.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 1}); !errors.Is(err, budget.ErrNotFound) {
		t.Fatalf("commit two days after settling = %v; want ErrNotFound (deleted)", err)
	}
	if _, err := tr.Commit(ctx, gone.ID, budget.Usage{Input: 1}); !errors.Is(err, budget.ErrNotFound) {
		t.Fatalf("commit two days after expiry = %v; want ErrNotFound (deleted)", err)
	}
	if _, err := tr.Commit(ctx, old.ID, budget.Usage{Input: 1}); !errors.Is(err, budget.ErrNotFound) {
		t.Fatalf("commit of the old reservation = %v; want ErrNotFound (deleted)", err)
	}
}
