package storetest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Budget leases (Config.Leases): reservations carved in memory from room a
// Tracker holds in the store, which every other tracker counts.

func init() {
	extra = append(extra,
		suiteCase{"BudgetLeasesExactAt64", testBudgetLeasesExact},
		suiteCase{"BudgetLeaseIdleGivenBack", testBudgetLeaseIdle},
		suiteCase{"BudgetLeaseCheckCountsAdmissions", testBudgetLeaseCheck},
		suiteCase{"BudgetLeaseRecoveredElsewhereFenced", testBudgetLeaseFenced},
		suiteCase{"BudgetLeaseFencedCommitsRecordOnlyTheExcess", testBudgetLeaseLate},
		suiteCase{"BudgetLeaseCarvedExpiryAndRenew", testBudgetLeaseExpiry},
		suiteCase{"BudgetLeaseRoomReadAsReserved", testBudgetLeaseReads},
	)
}

// NewLeaseTracker is NewTracker with budget leases on, journaled in dir
// (leases off when dir is "": a tracker that only recovers others').
func NewLeaseTracker(t testing.TB, s budget.Store, c *Clock, refresh time.Duration, dir string, leases bool) *budget.Tracker {
	t.Helper()
	return newTracker(t, s, c, refresh, func(cfg *budget.Config) { cfg.Leases, cfg.LeaseJournal = leases, dir })
}

// leaseReq is the request every lease case makes.
func leaseReq(est int64) budget.Request {
	return budget.Request{Key: "k", Provider: "p", Model: "m", Estimate: budget.Estimate{Input: est / 2, Output: est - est/2}}
}

// reserveUntilRefused has each of n goroutines reserve and commit (at the
// estimate) on tr until refused, and returns how many were admitted.
func reserveUntilRefused(t *testing.T, tr *budget.Tracker, n int, est int64) int64 {
	t.Helper()
	var admitted atomic.Int64
	err := concurrently(n, func(int) error {
		for {
			r, err := tr.ReserveWith(context.Background(), leaseReq(est), budget.ReserveOptions{TTL: time.Minute})
			var ex *budget.ExceededError
			if errors.As(err, &ex) {
				return nil
			}
			if err != nil {
				return err
			}
			admitted.Add(1)
			if _, err := tr.Commit(context.Background(), r.ID, budget.Usage{Input: est / 2, Output: est - est/2}); err != nil {
				return err
			}
		}
	})
	if err != nil {
		t.Fatalf("reserve and commit: %v", err)
	}
	return admitted.Load()
}

// Two trackers with leases, 32 goroutines each, admit exactly
// floor(limit/estimate) between them, and the store then holds exactly
// that usage and no room still held.
func testBudgetLeasesExact(t *testing.T, newDB NewDB) {
	open := newDB(t)
	c := NewClock(T0)
	dir := t.TempDir()
	a, b := NewLeaseTracker(t, open(), c, time.Second, dir, true), NewLeaseTracker(t, open(), c, time.Second, dir, true)
	obs := NewTracker(t, open(), c, 0)
	const limit, est = 70_000, 70
	l := SetLimit(t, obs, budget.LimitSpec{Key: "k", Window: "daily"}, limit)
	SetLimit(t, obs, budget.LimitSpec{Key: "k", Metric: string(budget.MetricRequests), Window: "daily"}, 5000)
	var got [2]int64
	var wg sync.WaitGroup
	for i, tr := range []*budget.Tracker{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = reserveUntilRefused(t, tr, 32, est)
		}()
	}
	wg.Wait()
	if total := got[0] + got[1]; total != limit/est {
		t.Fatalf("two leasing trackers x 32 goroutines admitted %d + %d = %d; want exactly %d", got[0], got[1], total, limit/est)
	}
	// Many were answered in memory, not by a store transaction each (near
	// the limit, and whenever all 32 goroutines find a lease empty at once,
	// the store's path answers).
	if n := a.Stats().Leased + b.Stats().Leased; n < limit/est/4 {
		t.Fatalf("%d of %d admissions were carved from leases; want at least a quarter", n, limit/est)
	}
	for _, tr := range []*budget.Tracker{a, b} {
		if _, err := tr.Flush(context.Background()); err != nil {
			t.Fatalf("Flush: %v", err)
		}
	}
	used, reserved := Used(t, obs, leaseReq(est), c.Now(), l.ID)
	if used != limit/est*est || used+reserved > limit {
		t.Fatalf("after the leased run: used %d, reserved %d; want used %d and used + reserved <= %d", used, reserved, limit/est*est, limit)
	}
	noDrift(t, obs)
}

// A tracker that took a lease under load and went idle gives its room back
// within 2 s of its clock: another tracker then admits all but at most one
// estimate of what is left.
func testBudgetLeaseIdle(t *testing.T, newDB NewDB) {
	open := newDB(t)
	c := NewClock(T0)
	dir := t.TempDir()
	a := NewLeaseTracker(t, open(), c, time.Second, dir, true)
	b := NewLeaseTracker(t, open(), c, time.Second, dir, false)
	const limit, est = 5000, 50
	l := SetLimit(t, b, budget.LimitSpec{Key: "k", Window: "daily"}, limit)
	ctx := context.Background()
	err := concurrently(16, func(int) error {
		for range 3 {
			r, err := a.Reserve(ctx, leaseReq(est), time.Minute)
			if err != nil {
				return err
			}
			if _, err := a.Commit(ctx, r.ID, budget.Usage{Input: est / 2, Output: est - est/2}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("load on A: %v", err)
	}
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	c.Advance(100 * time.Millisecond)
	used, held := Used(t, b, leaseReq(est), c.Now(), l.ID)
	if used != 48*est || held == 0 {
		t.Fatalf("while A leases: B sees used %d, reserved %d; want used %d and A's lease reserved", used, held, 48*est)
	}
	c.Advance(2 * time.Second)
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var n int64
	for {
		_, err := b.Reserve(ctx, leaseReq(est), time.Minute)
		var ex *budget.ExceededError
		if errors.As(err, &ex) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if room := int64(limit - 48*est); n*est < room-est {
		t.Fatalf("2 s after A went idle, B admitted %d x %d of the %d left; want all but at most one estimate", n, est, room)
	}
}

// leasingAndReading is tracker a with leases and b, which reads with no
// cache (refresh 0), on one database, clock and journal directory, with a
// daily limit of 100,000 tokens on key k.
func leasingAndReading(t *testing.T, newDB NewDB) (a, b *budget.Tracker, c *Clock, l budget.Limit) {
	t.Helper()
	open := newDB(t)
	c = NewClock(T0)
	dir := t.TempDir()
	a = NewLeaseTracker(t, open(), c, time.Second, dir, true)
	b = NewLeaseTracker(t, open(), c, 0, dir, false)
	return a, b, c, SetLimit(t, b, budget.LimitSpec{Key: "k", Window: "daily"}, 100_000)
}

// A check in the leasing process counts what its leases admitted (in
// flight) but not the room it may still carve; another process's check
// counts the whole lease as reserved.
func testBudgetLeaseCheck(t *testing.T, newDB NewDB) {
	a, b, c, l := leasingAndReading(t, newDB)
	const est = 100
	ctx := context.Background()
	var ids []string
	for range 5 {
		r, err := a.Reserve(ctx, leaseReq(est), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	if _, reserved := Used(t, a, leaseReq(est), c.Now(), l.ID); reserved != 5*est {
		t.Fatalf("A's check with 5 leased reservations in flight: reserved %d; want %d", reserved, 5*est)
	}
	if _, reserved := Used(t, b, leaseReq(est), c.Now(), l.ID); reserved < 5*est {
		t.Fatalf("B's check while A leases: reserved %d; want A's whole lease (at least %d)", reserved, 5*est)
	}
	for _, id := range ids[:3] {
		s, err := a.Commit(ctx, id, budget.Usage{Input: 10, Output: 20})
		if err != nil || s.RequestID != id || s.Expired || s.Charged {
			t.Fatalf("Commit(%s) = %+v, %v", id, s, err)
		}
	}
	if err := a.Release(ctx, ids[3]); err != nil {
		t.Fatal(err)
	}
	// Settled once, in memory as in the store: a second settlement is
	// refused, and adds nothing.
	if _, err := a.Commit(ctx, ids[1], budget.Usage{Input: 10, Output: 20}); !errors.Is(err, budget.ErrSettled) {
		t.Fatalf("second Commit of a leased reservation = %v; want ErrSettled", err)
	}
	if err := a.Release(ctx, ids[3]); !errors.Is(err, budget.ErrSettled) {
		t.Fatalf("second Release of a leased reservation = %v; want ErrSettled", err)
	}
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if used, reserved := Used(t, a, leaseReq(est), c.Now(), l.ID); used != 3*30 || reserved != est {
		t.Fatalf("A after 3 commits of 30, a release and one in flight: used %d, reserved %d; want 90, %d", used, reserved, est)
	}
	if used, _ := Used(t, b, leaseReq(est), c.Now(), l.ID); used != 90 {
		t.Fatalf("B after A's commits: used %d; want 90", used)
	}
	noDrift(t, b)
}

// A lease that another process recovered (its holder stalled past its
// TTL) is never settled against again: the stalled tracker's commits
// record their usage alone, and it serves new requests from a new lease.
func testBudgetLeaseFenced(t *testing.T, newDB NewDB) {
	a, b, c, l, ids := leasedThree(t, newDB, budget.ExpireRelease)
	const est = 100
	ctx := context.Background()
	// A stalls past its lease's TTL (its reservations' 20 s), and B
	// recovers it.
	c.Advance(30 * time.Second)
	res, err := b.Recover(ctx, c.Now())
	// The route's first request held a reservation of its own (a route
	// takes a lease from its second request on): that and the lease.
	if err != nil || res.ReleasedReservations != 2 {
		t.Fatalf("B's recovery of A's lease: %+v, %v; want 2 reservations released (the first request's and the lease)", res, err)
	}
	if _, reserved := Used(t, b, leaseReq(est), c.Now(), l.ID); reserved != 0 {
		t.Fatalf("after recovery B sees %d reserved; want 0", reserved)
	}
	for _, id := range ids {
		if _, err := a.Commit(ctx, id, budget.Usage{Input: 40, Output: 40}); err != nil {
			t.Fatalf("A's commit after its lease was recovered: %v", err)
		}
	}
	r, err := a.Reserve(ctx, leaseReq(est), time.Minute)
	if err != nil {
		t.Fatalf("A's reservation after its lease was lost: %v", err)
	}
	if _, err := a.Commit(ctx, r.ID, budget.Usage{Input: 40, Output: 40}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if used, _ := Used(t, b, leaseReq(est), c.Now(), l.ID); used != 4*80 {
		t.Fatalf("used after 4 commits of 80 across a lost lease: %d; want %d", used, 4*80)
	}
	if lost := a.Stats().LeasesLost; lost != 1 {
		t.Fatalf("LeasesLost = %d; want 1", lost)
	}
	noDrift(t, b)
}

// A tracker that stalls past its lease's TTL has the lease recovered by
// another from its journal: the commit journaled before the stall charged
// at its actual usage, the two in flight at their estimates (ExpireCharge).
// When the stalled tracker wakes and commits them, only what an actual
// exceeds its estimate by is recorded, as <id>:late: each request charged
// once.
func testBudgetLeaseLate(t *testing.T, newDB NewDB) {
	a, b, c, l, ids := leasedThree(t, newDB, budget.ExpireCharge)
	const est = 100
	ctx := context.Background()
	if _, err := a.Commit(ctx, ids[0], budget.Usage{Input: 30, Output: 30}); err != nil {
		t.Fatal(err)
	}
	c.Advance(30 * time.Second)
	if _, err := b.Recover(ctx, c.Now()); err != nil {
		t.Fatal(err)
	}
	// Recovered: 60 actual + 2 estimates of 100.
	if used, reserved := Used(t, b, leaseReq(est), c.Now(), l.ID); used != 60+2*est || reserved != 0 {
		t.Fatalf("after recovering the stalled lease: used %d, reserved %d; want %d, 0", used, reserved, 60+2*est)
	}
	if _, err := a.Commit(ctx, ids[1], budget.Usage{Input: 100, Output: 50}); err != nil { // 50 over
		t.Fatal(err)
	}
	if _, err := a.Commit(ctx, ids[2], budget.Usage{Input: 10, Output: 10}); err != nil { // under: nothing more
		t.Fatal(err)
	}
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if used, _ := Used(t, b, leaseReq(est), c.Now(), l.ID); used != 60+2*est+50 {
		t.Fatalf("after the stalled tracker's commits: used %d; want %d (each request charged once, plus one excess)", used, 60+2*est+50)
	}
	if s := a.Stats(); s.LeasesLost != 1 || s.LeaseLate != 1 {
		t.Fatalf("LeasesLost, LeaseLate = %d, %d; want 1, 1", s.LeasesLost, s.LeaseLate)
	}
	noDrift(t, b)
}

// leasedThree is tracker a with leases and b, which recovers others'
// leases, on one database and clock; a limit of 100,000 tokens on key k;
// and three reservations of 100 that a made (TTL 20 s, on expiry policy),
// the first on the store's path and two carved from a lease.
func leasedThree(t *testing.T, newDB NewDB, policy budget.ExpiryPolicy) (a, b *budget.Tracker, c *Clock, l budget.Limit, ids []string) {
	t.Helper()
	a, b, c, l = leasingAndReading(t, newDB)
	for range 3 {
		r, err := a.ReserveWith(context.Background(), leaseReq(100), budget.ReserveOptions{TTL: 20 * time.Second, OnExpiry: policy})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	return a, b, c, l, ids
}

// A reservation carved from a lease lives its own TTL, which Renew moves:
// past it, the writer's next look settles it by its policy (ExpireCharge:
// charged its estimate), and a commit after that records only the excess
// as <id>:late, reporting Expired and Charged, as on the store's path.
func testBudgetLeaseExpiry(t *testing.T, newDB NewDB) {
	a, b, c, l, ids := leasedThree(t, newDB, budget.ExpireCharge)
	ctx := context.Background()
	if _, err := a.Renew(ctx, ids[1], time.Minute); err != nil {
		t.Fatalf("Renew of a carved reservation: %v", err)
	}
	c.Advance(30 * time.Second)
	if _, err := a.Flush(ctx); err != nil { // its look charges ids[2]
		t.Fatal(err)
	}
	s, err := a.Commit(ctx, ids[2], budget.Usage{Input: 100, Output: 50})
	if err != nil || !s.Expired || !s.Charged || s.LateRequestID != ids[2]+budget.LateSuffix {
		t.Fatalf("commit past the TTL = %+v, %v; want Expired, Charged and a late event", s, err)
	}
	if s, err := a.Commit(ctx, ids[1], budget.Usage{Input: 30, Output: 30}); err != nil || s.Expired || s.Charged {
		t.Fatalf("commit of the renewed one = %+v, %v; want neither expired nor charged", s, err)
	}
	if _, err := a.Renew(ctx, ids[2], time.Minute); !errors.Is(err, budget.ErrLeaseLost) && !errors.Is(err, budget.ErrNotFound) {
		t.Fatalf("Renew after its commit = %v; want it refused", err)
	}
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// ids[0] (the store's path) is still held: not recovered here.
	if used, _ := Used(t, b, leaseReq(100), c.Now(), l.ID); used != 60+100+50 {
		t.Fatalf("used = %d; want %d (60 committed, 100 charged at expiry, 50 late)", used, 60+100+50)
	}
	noDrift(t, b)
}

// What each read counts of a lease. Inspect (the CLI's inspect, GET
// /v1/budget and the dashboard all read through it) counts a lease's
// whole hold as reserved, in the leasing process as in any other: the
// exact, conservative view, what every other process decides against. A
// check counts as its Reserve would decide: the free room of its own
// route's lease is its own to carve, so not reserved; another route's
// lease's free room is not (a Reserve cannot carve it), so reserved.
func testBudgetLeaseReads(t *testing.T, newDB NewDB) {
	a, b, c, l := leasingAndReading(t, newDB)
	const est = 100
	ctx := context.Background()
	for range 3 { // the first holds its own reservation, then the lease
		if _, err := a.Reserve(ctx, leaseReq(est), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	inspected := func(tr *budget.Tracker) int64 {
		t.Helper()
		rep, err := tr.Inspect(ctx, "k", c.Now(), 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range rep.Limits {
			if st.Limit.ID == l.ID {
				return st.Reserved
			}
		}
		t.Fatalf("inspect of k has no limit %s: %+v", l.ID, rep.Limits)
		return 0
	}
	whole := inspected(b)
	if whole <= 3*est {
		t.Fatalf("B inspects %d reserved; want A's reservation, its two carved ones and the lease's free room (over %d)", whole, 3*est)
	}
	if got := inspected(a); got != whole {
		t.Fatalf("A inspects %d reserved, B %d; want the same: inspect shows the whole lease in the leasing process too", got, whole)
	}
	if _, reserved := Used(t, b, leaseReq(est), c.Now(), l.ID); reserved != whole {
		t.Fatalf("B's check: reserved %d; want %d, the whole lease", reserved, whole)
	}
	if _, reserved := Used(t, a, leaseReq(est), c.Now(), l.ID); reserved != 3*est {
		t.Fatalf("A's check on the leased route: reserved %d; want %d (what it admitted, not its lease's free room)", reserved, 3*est)
	}
	other := leaseReq(est)
	other.Model = "m2" // another route, on the same key's limit
	if _, reserved := Used(t, a, other, c.Now(), l.ID); reserved != whole {
		t.Fatalf("A's check on another route: reserved %d; want %d (the other route's free room is not its to carve)", reserved, whole)
	}
}
