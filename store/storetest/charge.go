package storetest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func init() {
	extra = append(extra,
		suiteCase{"ChargeOnExpiryKeepsCounting", testChargeKeepsCounting},
		suiteCase{"ChargeOnExpiryChargesOnce", testChargeOnce},
		suiteCase{"LateCommitAfterCharge", testLateCommitAfterCharge},
		suiteCase{"ChargeLeasesEndAtExpiry", testChargeLeases},
		suiteCase{"FlexibleOutputExact", testFlexibleOutputExact},
		suiteCase{"ZeroTokenCommitIsARequest", testZeroCommitIsARequest},
	)
}

func charge(ttl time.Duration) budget.ReserveOptions {
	return budget.ReserveOptions{TTL: ttl, OnExpiry: budget.ExpireCharge}
}

// A charge reservation past its expiry still holds its estimate: nobody is
// admitted against money that may already be spent. Recovery then turns
// the hold into usage, so the room never reappears in between.
func testChargeKeepsCounting(t *testing.T, newDB NewDB) {
	tr, c, _ := setup(t, newDB)
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "daily"}, 100)
	req := budget.Request{Key: "k", Provider: "p", Model: "m", Estimate: budget.Estimate{Input: 60, Output: 40}}
	r, err := tr.ReserveWith(ctx, req, charge(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if r.OnExpiry != budget.ExpireCharge {
		t.Fatalf("OnExpiry = %q; want charge", r.OnExpiry)
	}
	c.Advance(5 * time.Minute)
	if u, res := Used(t, tr, budget.Request{Key: "k"}, c.Now(), l.ID); u != 0 || res != 100 {
		t.Fatalf("past expiry, before recovery: used/reserved = %d/%d; want 0/100", u, res)
	}
	var ex *budget.ExceededError
	if _, err := tr.Reserve(ctx, budget.Request{Key: "k", Estimate: tokens(1)}, time.Minute); !errors.As(err, &ex) {
		t.Fatalf("Reserve against an expired charge hold = %v; want ExceededError", err)
	}
	res, err := tr.Recover(ctx, c.Now())
	if err != nil {
		t.Fatal(err)
	}
	if res.ReleasedReservations != 1 || res.ChargedReservations != 1 {
		t.Fatalf("Recover = %+v; want 1 released, 1 charged", res)
	}
	if u, res := Used(t, tr, budget.Request{Key: "k"}, c.Now(), l.ID); u != 100 || res != 0 {
		t.Fatalf("after recovery used/reserved = %d/%d; want 100/0", u, res)
	}
	noDrift(t, tr)
}

// Four recoveries racing over two handles charge each reservation exactly
// once, and a release-policy reservation among them is never charged.
func testChargeOnce(t *testing.T, newDB NewDB) {
	open := newDB(t)
	c := NewClock(T0)
	a := NewTracker(t, open(), c, time.Second)
	b := NewTracker(t, open(), c, time.Second)
	l := SetLimit(t, a, budget.LimitSpec{Key: "k", Window: "1h"}, 1<<40)
	for range 20 {
		if _, err := a.ReserveWith(ctx, budget.Request{Key: "k", Estimate: budget.Estimate{Input: 7, Output: 3}}, charge(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Reserve(ctx, budget.Request{Key: "k", Estimate: tokens(1000)}, time.Minute); err != nil {
		t.Fatal(err)
	}
	c.Advance(2 * time.Minute)
	var charged, released atomic.Int64
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := a
			if i%2 == 1 {
				tr = b
			}
			res, err := tr.Recover(ctx, c.Now())
			if err != nil {
				t.Errorf("Recover: %v", err)
			}
			charged.Add(res.ChargedReservations)
			released.Add(res.ReleasedReservations)
		}()
	}
	wg.Wait()
	if charged.Load() != 20 || released.Load() != 21 {
		t.Fatalf("charged %d, released %d; want 20 and 21", charged.Load(), released.Load())
	}
	if u, res := Used(t, a, budget.Request{Key: "k"}, T0, l.ID); u != 200 || res != 0 {
		t.Fatalf("used/reserved = %d/%d; want 200 (20 estimates of 10) / 0", u, res)
	}
	noDrift(t, a)
}

// A commit that arrives after recovery charged the estimate records only
// the excess, per token kind, as <id>:late; a smaller actual records
// nothing more. Both report Expired and Charged.
func testLateCommitAfterCharge(t *testing.T, newDB NewDB) {
	tr, c, _ := setup(t, newDB)
	lt := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "daily"}, 1<<40)
	lo := SetLimit(t, tr, budget.LimitSpec{Key: "k", Metric: "output", Window: "daily"}, 1<<40)
	req := budget.Request{Key: "k", Provider: "p", Model: "m", Estimate: budget.Estimate{Input: 100, Output: 50}}
	big, err := tr.ReserveWith(ctx, req, charge(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	small, err := tr.ReserveWith(ctx, req, charge(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Minute)
	if res, err := tr.Recover(ctx, c.Now()); err != nil || res.ChargedReservations != 2 {
		t.Fatalf("Recover = %+v, %v; want 2 charged", res, err)
	}
	// Input 130 (30 over), output 20 + reasoning 45 (15 over the 50 output
	// allowance, all of it reasoning).
	s, err := tr.Commit(ctx, big.ID, budget.Usage{Input: 130, CacheRead: 100, Output: 20, Reasoning: 45})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Expired || !s.Charged || s.LateRequestID != big.ID+":late" {
		t.Fatalf("late commit = %+v; want Expired, Charged, LateRequestID %s:late", s, big.ID)
	}
	if u, _ := Used(t, tr, budget.Request{Key: "k"}, c.Now(), lt.ID); u != 300+30+15 {
		t.Fatalf("tokens used = %d; want 2 charged estimates (300) + late 45", u)
	}
	if u, _ := Used(t, tr, budget.Request{Key: "k"}, c.Now(), lo.ID); u != 100+15 {
		t.Fatalf("output used = %d; want 100 charged + 15 late", u)
	}
	s, err = tr.Commit(ctx, small.ID, budget.Usage{Input: 10, Output: 5})
	if err != nil || !s.Charged || s.LateRequestID != "" {
		t.Fatalf("smaller late commit = %+v, %v; want Charged, nothing late", s, err)
	}
	if u, _ := Used(t, tr, budget.Request{Key: "k"}, c.Now(), lt.ID); u != 345 {
		t.Fatalf("tokens used after a smaller late commit = %d; want 345 unchanged", u)
	}
	if _, err := tr.Commit(ctx, big.ID, budget.Usage{Input: 1}); !errors.Is(err, budget.ErrSettled) {
		t.Fatalf("second commit = %v; want ErrSettled", err)
	}
	noDrift(t, tr)
}

// The concurrency lease of a charge reservation ends at its expiry (a
// crashed proxy's slots come back), renewing moves the lease but never
// lets the window hold lapse.
func testChargeLeases(t *testing.T, newDB NewDB) {
	tr, c, _ := setup(t, newDB)
	SetLimit(t, tr, budget.LimitSpec{Key: "k", Metric: "concurrent"}, 1)
	lw := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "daily"}, 1000)
	req := budget.Request{Key: "k", Estimate: tokens(100)}
	r, err := tr.ReserveWith(ctx, req, charge(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c.Advance(15 * time.Second)
	if _, err := tr.Renew(ctx, r.ID, 20*time.Second); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	c.Advance(15 * time.Second) // 30 s after reserving, 15 s after renewing
	var ex *budget.ExceededError
	if _, err := tr.Reserve(ctx, req, time.Minute); !errors.As(err, &ex) || ex.Decision.Breach.Limit.Metric != budget.MetricConcurrent {
		t.Fatalf("Reserve while the renewed lease lives = %v; want refused by the concurrent limit", err)
	}
	c.Advance(6 * time.Second) // past the renewed expiry, no sweep
	r2, err := tr.Reserve(ctx, req, time.Minute)
	if err != nil {
		t.Fatalf("Reserve after the lease lapsed = %v; want admitted", err)
	}
	if _, res := Used(t, tr, budget.Request{Key: "k"}, c.Now(), lw.ID); res != 200 {
		t.Fatalf("reserved = %d; want 200: the lapsed charge hold still counts", res)
	}
	if err := tr.Release(ctx, r2.ID); err != nil {
		t.Fatal(err)
	}
}

// Flexible reservations (MinOutput) shrink their output to the room left,
// decided in the writer's transaction: 64 of them at once on two handles
// never take the limit over, and each holds at least the floor.
func testFlexibleOutputExact(t *testing.T, newDB NewDB) {
	a, b, _ := twoHandles(t, newDB)
	l := SetLimit(t, a, budget.LimitSpec{Key: "k", Window: "1h"}, 5000)
	rs := reserveAll(t, a, b, 64, func(int) (budget.Request, budget.ReserveOptions) {
		return budget.Request{Key: "k", Estimate: budget.Estimate{Input: 50, Output: 1000}},
			budget.ReserveOptions{TTL: time.Minute, MinOutput: 16}
	})
	var held int64
	for _, r := range rs {
		if r == nil {
			continue
		}
		held += r.Estimate.Input + r.Estimate.Output
		if r.Estimate.Output < 16 || r.Estimate.Output > 1000 {
			t.Errorf("granted output %d; want between 16 and 1000", r.Estimate.Output)
		}
	}
	_, res := Used(t, a, budget.Request{Key: "k"}, T0, l.ID)
	if res != held || res > 5000 {
		t.Fatalf("reserved %d, granted %d in all; want equal and at most 5000", res, held)
	}
	// 4 full estimates fit (4200), then one shrunk to output 750 (the 800
	// left less its input), then nothing fits input + floor.
	if n := admitted(rs); n != 5 || res != 5000 {
		t.Fatalf("admitted %d holding %d; want 5 holding 5000", n, res)
	}
}

// A commit of zero tokens is still one request: it is recorded.
func testZeroCommitIsARequest(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Metric: "requests", Window: "1h"}, 10)
	r, err := tr.Reserve(ctx, budget.Request{Key: "k", Estimate: tokens(5)}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Commit(ctx, r.ID, budget.Usage{}); err != nil {
		t.Fatal(err)
	}
	if u, _ := Used(t, tr, budget.Request{Key: "k"}, T0, l.ID); u != 1 {
		t.Fatalf("requests used %d after a zero-token commit; want 1", u)
	}
	noDrift(t, tr)
}
