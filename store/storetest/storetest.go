// Package storetest is the behavioural suite every budget.Store passes: the
// contract's counting, windows, seeding, rollovers, duplicates, late
// events, cache refresh, reservations, leases, recovery, parking and verify,
// all driven through budget.Tracker so each backend is held to the same
// rules. It is imported by each store's tests; the helpers here are safe for
// use from parallel subtests.
package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// NewDB makes a fresh, empty database for one test and returns a function
// that opens a new handle to it. Several handles to one database stand for
// several processes sharing it. Handles are closed by t.Cleanup.
type NewDB func(t testing.TB) (open func() budget.Store)

// Run runs the whole suite against the store newDB makes.
func Run(t *testing.T, newDB NewDB) {
	for _, tc := range append([]suiteCase{
		{"ScopeMatching", testScopeMatching},
		{"SeedMidWindow", testSeedMidWindow},
		{"FirstRequestCountedOnce", testFirstRequestOnce},
		{"RolloverOnce", testRolloverOnce},
		{"Duplicates", testDuplicates},
		{"LateEvents", testLateEvents},
		{"DisabledCountsButDoesNotEnforce", testDisabled},
		{"ReadYourWrites", testReadYourWrites},
		{"OtherProcessSeenAfterRefresh", testOtherProcess},
		{"LimitIdentity", testLimitIdentity},
		{"VerifyAfterMixedWorkload", testVerifyMixed},
		{"ReservationsExact", testReserveExact},
		{"CommitAndRelease", testCommitRelease},
		{"ExpiryWithoutSweep", testExpiryWithoutSweep},
		{"RecoverConcurrent", testRecoverConcurrent},
		{"ReservationAcrossBoundary", testReserveBoundary},
		{"Leases", testLeases},
		{"ReserveSeesUnflushedUsage", testReserveSeesPending},
		{"SumsSaturate", testSaturation},
		{"RolloverOnFirstRow", testRolloverFirstRow},
		{"ReadsWriteNothing", testReadsWriteNothing},
	}, extra...) {
		// Each case has a database, a clock and a tracker of its own: they
		// run side by side, as a store's callers do (on PostgreSQL the
		// suite waits mostly on round trips).
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newDB)
		})
	}
}

type suiteCase struct {
	name string
	fn   func(*testing.T, NewDB)
}

// extra holds the cases other files of the suite register.
var extra []suiteCase

// Clock is a settable clock for Config.Now.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock stopped at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now reads the clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// T0 is the suite's starting instant: a Monday, 09:00 UTC.
var T0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// NewTracker starts a Tracker on s with clock c and a quiet config: no
// background sweep, the given refresh interval. It is closed by t.Cleanup.
func NewTracker(t testing.TB, s budget.Store, c *Clock, refresh time.Duration) *budget.Tracker {
	t.Helper()
	return newTracker(t, s, c, refresh, nil)
}

// newTracker is NewTracker with its config changed by mutate (may be nil).
func newTracker(t testing.TB, s budget.Store, c *Clock, refresh time.Duration, mutate func(*budget.Config)) *budget.Tracker {
	t.Helper()
	cfg := budget.DefaultConfig()
	cfg.Now = c.Now
	cfg.RefreshInterval = refresh
	cfg.SweepInterval = -1
	if mutate != nil {
		mutate(&cfg)
	}
	tr, err := budget.New(context.Background(), s, cfg)
	if err != nil {
		t.Fatalf("budget.New: %v", err)
	}
	t.Cleanup(func() {
		if err := tr.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return tr
}

// setup is one database, one tracker on it and a clock at T0.
func setup(t *testing.T, newDB NewDB) (*budget.Tracker, *Clock, func() budget.Store) {
	t.Helper()
	open := newDB(t)
	c := NewClock(T0)
	return NewTracker(t, open(), c, time.Second), c, open
}

// SetLimit creates or updates a limit or fails the test.
func SetLimit(t testing.TB, tr *budget.Tracker, s budget.LimitSpec, max int64) budget.Limit {
	t.Helper()
	s.Max = &max
	l, _, err := tr.SetLimit(context.Background(), s)
	if err != nil {
		t.Fatalf("SetLimit(%+v): %v", s, err)
	}
	return l
}

// RecordSync records events and waits for them, failing the test on error.
func RecordSync(t testing.TB, tr *budget.Tracker, evs ...budget.Usage) []bool {
	t.Helper()
	d, err := tr.RecordSync(context.Background(), evs...)
	if err != nil {
		t.Fatalf("RecordSync: %v", err)
	}
	return d
}

// Used is the used amount of limit id in a check of req at at.
func Used(t testing.TB, tr *budget.Tracker, req budget.Request, at time.Time, id string) (used, reserved int64) {
	t.Helper()
	d, err := tr.CheckAt(context.Background(), req, at)
	if err != nil {
		t.Fatalf("CheckAt: %v", err)
	}
	for _, s := range d.Limits {
		if s.Limit.ID == id {
			return s.Used, s.Reserved
		}
	}
	t.Fatalf("limit %s not applicable to %+v (limits %v)", id, req, d.Limits)
	return 0, 0
}

// ev is a usage event of key k to provider p, model m.
func ev(id, k, p, m string, in, out int64, at time.Time) budget.Usage {
	return budget.Usage{RequestID: id, Key: k, Provider: p, Model: m, Input: in, Output: out, At: at}
}

func noDrift(t *testing.T, tr *budget.Tracker) {
	t.Helper()
	d, err := tr.Verify(context.Background())
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if len(d) != 0 {
		t.Fatalf("Verify found drift: %+v", d)
	}
}

// twoHandles is one database opened twice ("two processes"), a tracker on
// each, and their shared clock at T0.
func twoHandles(t *testing.T, newDB NewDB) (a, b *budget.Tracker, c *Clock) {
	t.Helper()
	open := newDB(t)
	c = NewClock(T0)
	return NewTracker(t, open(), c, time.Second), NewTracker(t, open(), c, time.Second), c
}

// reserveAll runs n reservations at once, alternating between a and b,
// with the request and options of each index, and returns those admitted
// (nil where refused). Any error but a refusal fails the test.
func reserveAll(t *testing.T, a, b *budget.Tracker, n int, at func(i int) (budget.Request, budget.ReserveOptions)) []*budget.Reservation {
	t.Helper()
	out := make([]*budget.Reservation, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := a
			if i%2 == 1 {
				tr = b
			}
			req, opts := at(i)
			r, err := tr.ReserveWith(context.Background(), req, opts)
			var ex *budget.ExceededError
			switch {
			case err == nil:
				out[i] = r
			case !errors.As(err, &ex):
				t.Errorf("Reserve: %v", err)
			}
		}()
	}
	wg.Wait()
	return out
}

// admitted counts the non-nil reservations.
func admitted(rs []*budget.Reservation) (n int) {
	for _, r := range rs {
		if r != nil {
			n++
		}
	}
	return n
}
