package storetest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// A leasing process that stalls past its TTLs while another recovers its
// leases without the journal: the recovery charges the rest of each lease,
// and the commits of the process that wakes record only what they exceed
// the estimates that charge covered by (issue 27's Fenced rule), whatever
// the waking process's writer did first.

func init() {
	extra = append(extra,
		suiteCase{"BudgetLeaseWithoutItsJournalChargedTheRest", func(t *testing.T, newDB NewDB) {
			testBudgetLeaseUnjournaled(t, newDB, false, budget.ExpireRelease)
		}},
		suiteCase{"BudgetLeaseChargedWholeThenExpiredByTheOwnerCountsOnce", func(t *testing.T, newDB NewDB) {
			testBudgetLeaseUnjournaled(t, newDB, true, budget.ExpireRelease)
		}},
		suiteCase{"BudgetLeaseChargedWholeThenChargedByExpiryCountsOnce", func(t *testing.T, newDB NewDB) {
			testBudgetLeaseUnjournaled(t, newDB, true, budget.ExpireCharge)
		}},
		suiteCase{"BudgetLeaseRoomGivenBackBeforeTheWholeChargeRecordedWhole", testBudgetLeaseGivenBackThenCharged},
		suiteCase{"BudgetLeaseGrownWithoutItsJournalOverchargedAtMostOneRefill", testBudgetLeaseGrownUnjournaled},
		suiteCase{"BudgetLeaseFoundLostBeforeItsRecoveryThenCommitsOnlyTheExcess", testBudgetLeaseLostBeforeRecovery},
	)
}

// A lease whose journal the recovering process cannot read (its owner ran
// on another machine and never came back) is charged the rest of the
// lease: its holds as last written, never less than what was in flight.
// What that overcharges (the lease's unused room) is the bound logged.
// With look, the owner's writer looks after its leases (as its idle tick
// may, first thing when it wakes) before the commit: that settles the
// carved reservation by expiry, its room back to the lost lease's free
// part (ExpireRelease) or charging its estimate (ExpireCharge), which the
// whole charge covered already.
func testBudgetLeaseUnjournaled(t *testing.T, newDB NewDB, look bool, policy budget.ExpiryPolicy) {
	opts := []budget.ReserveOptions{{TTL: 20 * time.Second}, {TTL: 20 * time.Second}, {TTL: 20 * time.Second, OnExpiry: policy}}
	a, b, c, l, ids := stalling(t, newDB, opts...)
	ctx := context.Background()
	if _, err := a.Commit(ctx, ids[1], budget.Usage{Input: 30, Output: 30}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// A's first reservation is its own row (100); the rest is the lease.
	used, reserved := Used(t, b, leaseReq(100), c.Now(), l.ID)
	lease := reserved - 100
	if used != 60 || lease < 100 {
		t.Fatalf("before the crash: used %d, reserved %d; want 60, and a lease holding at least the one in flight", used, reserved)
	}
	stalled := c.Now().Add(30 * time.Second)
	if look {
		// Recovered before A's clock shows the TTLs past: A's writer (its
		// tick runs on real time) cannot look at its leases in between.
		if _, err := b.Recover(ctx, stalled); err != nil {
			t.Fatal(err)
		}
	}
	c.Advance(30 * time.Second)
	if !look {
		res, err := b.Recover(ctx, stalled)
		if err != nil {
			t.Fatal(err)
		}
		if res.UnjournaledLeases != 1 {
			t.Errorf("Recover charging a lease without its journal: %+v; want UnjournaledLeases 1", res)
		}
	}
	if n := b.Stats().LeasesUnjournaled; n != 1 {
		t.Errorf("Stats.LeasesUnjournaled after recovering one lease without its journal: %d; want 1", n)
	}
	used, reserved = Used(t, b, leaseReq(100), c.Now(), l.ID)
	if used != 60+lease || reserved != 0 {
		t.Fatalf("after recovering without the journal: used %d, reserved %d; want %d (the rest of the lease), 0", used, reserved, 60+lease)
	}
	t.Logf("charged beyond what was served (one request of 100 in flight): %d tokens", lease-100)
	if look {
		if _, err := a.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if used, _ = Used(t, b, leaseReq(100), c.Now(), l.ID); used != 60+lease {
			t.Fatalf("after the returning tracker's look at its leases: used %d; want %d (nothing more)", used, 60+lease)
		}
	}
	// A comes back: its commit adds only what exceeds the estimate the
	// lease's charge covered, as <id>:late.
	s, err := a.Commit(ctx, ids[2], budget.Usage{Input: 100, Output: 70})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if used, _ = Used(t, b, leaseReq(100), c.Now(), l.ID); used != 60+lease+70 || s.RequestID != ids[2] {
		t.Fatalf("after the returning tracker's commit of 170 (estimate 100): used %d; want %d", used, 60+lease+70)
	}
	noDrift(t, b)
}

// A carved reservation that expired while its lease was still its
// owner's, its room given back to the store, is not in the hold a later
// recovery charges whole: its late commit records its whole usage, while
// one still in flight at the recovery records only its excess.
func testBudgetLeaseGivenBackThenCharged(t *testing.T, newDB NewDB) {
	a, b, c, l, ids := stalling(t, newDB, budget.ReserveOptions{TTL: 20 * time.Second}, budget.ReserveOptions{TTL: 20 * time.Second},
		budget.ReserveOptions{TTL: 2 * time.Second}, budget.ReserveOptions{TTL: time.Minute})
	ctx := context.Background()
	if _, err := a.Commit(ctx, ids[1], budget.Usage{Input: 30, Output: 30}); err != nil {
		t.Fatal(err)
	}
	// Past ids[2]'s TTL and idle: the look settles it by expiry and gives
	// the lease's free room back, ids[3]'s 100 alone left held.
	c.Advance(3 * time.Second)
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	used, reserved := Used(t, b, leaseReq(100), c.Now(), l.ID)
	if used != 60 || reserved != 200 {
		t.Fatalf("after the give-back: used %d, reserved %d; want 60, 200 (A's own reservation and the one in flight)", used, reserved)
	}
	c.Advance(30 * time.Second) // past the lease's TTL: A stalled
	if _, err := b.Recover(ctx, c.Now()); err != nil {
		t.Fatal(err)
	}
	if used, _ = Used(t, b, leaseReq(100), c.Now(), l.ID); used != 60+100 {
		t.Fatalf("after recovering without the journal: used %d; want %d (the lease's hold of 100)", used, 60+100)
	}
	for _, id := range ids[2:] {
		if _, err := a.Commit(ctx, id, budget.Usage{Input: 100, Output: 70}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// ids[2]: 170 whole, its room not in the charge; ids[3]: 70 beyond
	// the 100 charged for it.
	if used, _ = Used(t, b, leaseReq(100), c.Now(), l.ID); used != 60+100+170+70 {
		t.Fatalf("after the returning tracker's commits of 170 each: used %d; want %d", used, 60+100+170+70)
	}
	noDrift(t, b)
}

// A process that finds its lease past its TTL before any other recovered
// it (its look settles an ExpireCharge carve by expiry meanwhile), then
// sees it charged whole by a recovery without its journal, commits a
// carve that was in flight through it all for only the excess over its
// estimate: the whole charge is looked for again, not remembered absent.
func testBudgetLeaseLostBeforeRecovery(t *testing.T, newDB NewDB) {
	a, b, c, l, ids := stalling(t, newDB, budget.ReserveOptions{TTL: 20 * time.Second}, budget.ReserveOptions{TTL: 20 * time.Second},
		budget.ReserveOptions{TTL: 20 * time.Second, OnExpiry: budget.ExpireCharge}, budget.ReserveOptions{TTL: time.Minute})
	ctx := context.Background()
	c.Advance(30 * time.Second)
	if _, err := a.Flush(ctx); err != nil { // finds the lease lost, charges ids[2]'s expiry
		t.Fatal(err)
	}
	if _, err := b.Recover(ctx, c.Now()); err != nil {
		t.Fatal(err)
	}
	before, _ := Used(t, b, leaseReq(100), c.Now(), l.ID)
	if _, err := a.Commit(ctx, ids[3], budget.Usage{Input: 100, Output: 70}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if used, _ := Used(t, b, leaseReq(100), c.Now(), l.ID); used-before != 70 {
		t.Fatalf("the commit of 170 (estimate 100) after the whole charge added %d; want 70", used-before)
	}
	noDrift(t, b)
}

// stalling is a leasing tracker a, b another machine's (leases off, its
// own journal directory) that recovers a's leases without their journal,
// the clock they share, a daily limit on k, and a's reservations made
// with opts in order: the first holds its own row, the rest are carved
// from the lease the second takes.
func stalling(t *testing.T, newDB NewDB, opts ...budget.ReserveOptions) (a, b *budget.Tracker, c *Clock, l budget.Limit, ids []string) {
	t.Helper()
	open := newDB(t)
	c = NewClock(T0)
	a = NewLeaseTracker(t, open(), c, time.Second, t.TempDir(), true)
	b = NewLeaseTracker(t, open(), c, 0, t.TempDir(), false)
	l = SetLimit(t, b, budget.LimitSpec{Key: "k", Window: "daily"}, 100_000)
	for _, o := range opts {
		r, err := a.ReserveWith(context.Background(), leaseReq(100), o)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	return a, b, c, l, ids
}

// The crash bound of a grown lease. A leasing tracker serves steady demand
// (64 goroutines reserving and committing) until its route's lease has
// grown, then keeps reserving without committing until the lease is
// refilled, and dies at once: the worst moment, its lease holding a whole
// refill of free room. A replica that cannot read its journal charges the
// rest of the lease: never less than it served (each reservation in
// flight at its estimate), and beyond that at most the last refill, which
// is capped at 1,024 estimates (and at half the room left). The figure is
// logged: BENCHMARKS.md reports it.
func testBudgetLeaseGrownUnjournaled(t *testing.T, newDB NewDB) {
	const est, maxRefill = 100, 1024
	open := newDB(t)
	c := NewClock(T0)
	a := NewLeaseTracker(t, open(), c, time.Second, t.TempDir(), true)
	b := NewLeaseTracker(t, open(), c, 0, t.TempDir(), false) // another machine
	l := SetLimit(t, b, budget.LimitSpec{Key: "k", Window: "daily"}, 1e8)
	ctx := context.Background()
	var committed atomic.Int64
	err := concurrently(64, func(int) error {
		for range 60 {
			r, err := a.Reserve(ctx, leaseReq(est), 20*time.Second)
			if err != nil {
				return err
			}
			if _, err := a.Commit(ctx, r.ID, budget.Usage{Input: 40, Output: 50}); err != nil {
				return err
			}
			committed.Add(90)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// In flight until the lease runs out and is refilled: a reservation
	// the lease did not carve went to the writer, which grew it.
	inflight := int64(0)
	for {
		before := a.Stats().Leased
		if _, err := a.Reserve(ctx, leaseReq(est), 20*time.Second); err != nil {
			t.Fatal(err)
		}
		inflight++
		if a.Stats().Leased == before {
			break
		}
		if inflight > 4*maxRefill {
			t.Fatal(errors.New("the lease was never refilled"))
		}
	}
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	used, held := Used(t, b, leaseReq(est), c.Now(), l.ID)
	if used != committed.Load() {
		t.Fatalf("before the crash: used %d; want the %d committed", used, committed.Load())
	}
	stalled := c.Now().Add(30 * time.Second)
	c.Advance(30 * time.Second)
	if _, err := b.Recover(ctx, stalled); err != nil {
		t.Fatal(err)
	}
	after, reserved := Used(t, b, leaseReq(est), c.Now(), l.ID)
	served := committed.Load() + inflight*est
	over := after - served
	if reserved != 0 || over < 0 || over > maxRefill*est {
		t.Fatalf("after recovering the grown lease without its journal: used %d, reserved %d; want at least the %d served and at most %d more, 0",
			after, reserved, served, maxRefill*est)
	}
	if over <= 32*est {
		t.Fatalf("charged %d beyond what was served: no more than a fresh lease's room; the lease did not grow", over)
	}
	t.Logf("a grown lease (%d held at the crash, %d requests in flight) charged %d tokens (%d estimates) beyond the %d served",
		held, inflight, over, over/est, served)
	noDrift(t, b)
}
