package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func init() {
	extra = append(extra,
		suiteCase{"CacheAgeAcrossClockSteps", testCacheClockSteps},
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
