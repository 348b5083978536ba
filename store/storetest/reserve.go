package storetest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func tokens(n int64) budget.Estimate { return budget.Estimate{Tokens: n} }

func testReserveExact(t *testing.T, newDB NewDB) {
	a, b, _ := twoHandles(t, newDB)
	SetLimit(t, a, budget.LimitSpec{Key: "k", Window: "1h"}, 1000)
	rs := reserveAll(t, a, b, 48, func(int) (budget.Request, budget.ReserveOptions) {
		return budget.Request{Key: "k", Provider: "p", Model: "m", Estimate: tokens(70)}, budget.ReserveOptions{TTL: time.Minute}
	})
	if n := admitted(rs); n != 1000/70 {
		t.Fatalf("admitted %d of 48; want exactly %d", n, 1000/70)
	}
}

func testCommitRelease(t *testing.T, newDB NewDB) {
	tr, c, _ := setup(t, newDB)
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "1h"}, 1000)
	req := budget.Request{Key: "k", Provider: "p", Model: "m", Estimate: tokens(100)}
	r, err := tr.Reserve(ctx, req, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if u, res := Used(t, tr, req, T0, l.ID); u != 0 || res != 100 {
		t.Fatalf("after reserve used/reserved = %d/%d; want 0/100", u, res)
	}
	s, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 20, Output: 10})
	if err != nil || s.Expired || s.RequestID != r.ID {
		t.Fatalf("Commit = %+v, %v", s, err)
	}
	if u, res := Used(t, tr, req, T0, l.ID); u != 30 || res != 0 {
		t.Fatalf("after a smaller commit used/reserved = %d/%d; want 30/0", u, res)
	}
	if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 1}); !errors.Is(err, budget.ErrSettled) {
		t.Fatalf("second commit = %v; want ErrSettled", err)
	}
	if err := tr.Release(ctx, r.ID); !errors.Is(err, budget.ErrSettled) {
		t.Fatalf("release after commit = %v; want ErrSettled", err)
	}
	r2, err := tr.Reserve(ctx, req, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Commit(ctx, r2.ID, budget.Usage{Input: 400, Output: 100, Reasoning: 50}); err != nil {
		t.Fatal(err)
	}
	if u, _ := Used(t, tr, req, T0, l.ID); u != 580 {
		t.Fatalf("after a larger commit used = %d; want 580 (recorded as it is)", u)
	}
	r3, err := tr.Reserve(ctx, req, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Release(ctx, r3.ID); err != nil {
		t.Fatal(err)
	}
	if u, res := Used(t, tr, req, T0, l.ID); u != 580 || res != 0 {
		t.Fatalf("after release used/reserved = %d/%d; want 580/0", u, res)
	}
	if err := tr.Release(ctx, "rsv_unknown"); !errors.Is(err, budget.ErrNotFound) {
		t.Fatalf("release unknown = %v; want ErrNotFound", err)
	}
	if _, err := tr.Commit(ctx, r3.ID, budget.Usage{Input: -1}); !errors.Is(err, budget.ErrInvalid) {
		t.Fatalf("commit negative = %v; want ErrInvalid", err)
	}
	for _, bad := range []budget.Estimate{{}, {Tokens: -5}} {
		if _, err := tr.Reserve(ctx, budget.Request{Key: "k", Estimate: bad}, time.Minute); !errors.Is(err, budget.ErrInvalid) {
			t.Fatalf("Reserve(%+v) = %v; want ErrInvalid", bad, err)
		}
	}
	if _, err := tr.Reserve(ctx, req, -time.Second); !errors.Is(err, budget.ErrInvalid) {
		t.Fatalf("Reserve(ttl<0) = %v; want ErrInvalid", err)
	}
	// A late commit still records the usage and says it expired.
	r4, err := tr.Reserve(ctx, req, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c.Advance(2 * time.Minute)
	s, err = tr.Commit(ctx, r4.ID, budget.Usage{Input: 5})
	if err != nil || !s.Expired {
		t.Fatalf("late commit = %+v, %v; want Expired", s, err)
	}
	if u, _ := Used(t, tr, req, T0, l.ID); u != 585 {
		t.Fatalf("after a late commit used = %d; want 585", u)
	}
	noDrift(t, tr)
}

func testExpiryWithoutSweep(t *testing.T, newDB NewDB) {
	tr, c, _ := setup(t, newDB)
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "daily"}, 100)
	req := budget.Request{Key: "k", Estimate: tokens(100)}
	if _, err := tr.Reserve(ctx, req, time.Minute); err != nil {
		t.Fatal(err)
	}
	var ex *budget.ExceededError
	if _, err := tr.Reserve(ctx, req, time.Minute); !errors.As(err, &ex) {
		t.Fatalf("second Reserve = %v; want ExceededError", err)
	}
	if ex.Decision.Breach.Reserved != 100 {
		t.Errorf("refusal reserved = %d; want 100", ex.Decision.Breach.Reserved)
	}
	c.Advance(time.Minute) // the hold lapses exactly at its expiry instant
	if _, res := Used(t, tr, budget.Request{Key: "k"}, c.Now(), l.ID); res != 0 {
		t.Fatalf("reserved after expiry = %d; want 0 without any sweep", res)
	}
	if _, err := tr.Reserve(ctx, req, time.Minute); err != nil {
		t.Fatalf("Reserve after expiry = %v; want admitted without any sweep", err)
	}
}

func testRecoverConcurrent(t *testing.T, newDB NewDB) {
	open := newDB(t)
	c := NewClock(T0)
	a := NewTracker(t, open(), c, time.Second)
	b := NewTracker(t, open(), c, time.Second)
	SetLimit(t, a, budget.LimitSpec{Key: "k", Window: "1h"}, 1<<40)
	SetLimit(t, a, budget.LimitSpec{Key: "k", Metric: "concurrent"}, 100)
	var ids []string
	for range 20 {
		r, err := a.Reserve(ctx, budget.Request{Key: "k", Estimate: tokens(10)}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	c.Advance(2 * time.Minute)
	var total, leases atomic.Int64
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
			total.Add(res.ReleasedReservations)
			leases.Add(res.ReleasedLeases)
		}()
	}
	wg.Wait()
	if total.Load() != 20 || leases.Load() != 20 {
		t.Fatalf("recovered %d reservations, %d leases; want 20 and 20 in all", total.Load(), leases.Load())
	}
	if err := a.Release(ctx, ids[0]); err != nil {
		t.Fatalf("release of an expired reservation = %v; want nil", err)
	}
	s, err := a.Commit(ctx, ids[1], budget.Usage{Input: 3})
	if err != nil || !s.Expired {
		t.Fatalf("commit of a recovered reservation = %+v, %v; want recorded, Expired", s, err)
	}
	// Past retention they are gone.
	c.Advance(25 * time.Hour)
	if _, err := a.Recover(ctx, c.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Commit(ctx, ids[2], budget.Usage{Input: 3}); !errors.Is(err, budget.ErrNotFound) {
		t.Fatalf("commit after retention = %v; want ErrNotFound", err)
	}
}

func testReserveBoundary(t *testing.T, newDB NewDB) {
	tr, c, _ := setup(t, newDB)
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "1h"}, 1000)
	c.Set(T0.Add(59*time.Minute + 30*time.Second))
	r, err := tr.Reserve(ctx, budget.Request{Key: "k", Estimate: tokens(300)}, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	next := T0.Add(time.Hour + 10*time.Second)
	c.Set(next)
	req := budget.Request{Key: "k"}
	if _, res := Used(t, tr, req, next, l.ID); res != 0 {
		t.Fatalf("reserved in the next window = %d; want 0 (a hold counts only in its own window)", res)
	}
	if _, res := Used(t, tr, req, T0.Add(59*time.Minute+40*time.Second), l.ID); res != 300 {
		t.Fatalf("reserved in its own window = %d; want 300", res)
	}
	if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 250}); err != nil {
		t.Fatal(err)
	}
	if u, _ := Used(t, tr, req, T0, l.ID); u != 250 {
		t.Fatalf("committed usage in the admitting window = %d; want 250", u)
	}
	if u, _ := Used(t, tr, req, next, l.ID); u != 0 {
		t.Fatalf("committed usage in the next window = %d; want 0", u)
	}
	noDrift(t, tr)
}

func testLeases(t *testing.T, newDB NewDB) {
	tr, c, _ := setup(t, newDB)
	l := SetLimit(t, tr, budget.LimitSpec{Key: "k", Metric: "concurrent"}, 2)
	req := budget.Request{Key: "k", Estimate: tokens(1)}
	r1, err := tr.Reserve(ctx, req, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Second)
	r2, err := tr.Reserve(ctx, req, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if u, _ := Used(t, tr, budget.Request{Key: "k"}, c.Now(), l.ID); u != 2 {
		t.Fatalf("concurrent used = %d; want 2 live leases", u)
	}
	var ex *budget.ExceededError
	if _, err := tr.Reserve(ctx, req, time.Minute); !errors.As(err, &ex) {
		t.Fatalf("third lease = %v; want ExceededError", err)
	}
	if got := ex.Decision.Breach.RetryAfterSeconds(); got != 2 {
		t.Errorf("retry_after_seconds = %d; want 2 (earliest lease expiry)", got)
	}
	// Renew pushes r1's lease out; then it survives past its first expiry.
	if _, err := tr.Renew(ctx, r1.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	c.Advance(5 * time.Second)
	if _, err := tr.Reserve(ctx, req, time.Minute); !errors.As(err, &ex) {
		t.Fatalf("lease after renew = %v; want still refused", err)
	}
	if ex.Decision.Breach.RetryAfterSeconds() != 5 {
		t.Errorf("retry_after_seconds = %d; want capped at 5", ex.Decision.Breach.RetryAfterSeconds())
	}
	if _, err := tr.Commit(ctx, r2.ID, budget.Usage{Input: 1}); err != nil {
		t.Fatal(err)
	}
	r3, err := tr.Reserve(ctx, req, time.Second)
	if err != nil {
		t.Fatalf("lease after a commit freed one = %v", err)
	}
	if _, err := tr.Renew(ctx, r2.ID, time.Minute); !errors.Is(err, budget.ErrLeaseLost) {
		t.Fatalf("renew of a committed reservation = %v; want ErrLeaseLost", err)
	}
	c.Advance(2 * time.Second)
	if _, err := tr.Renew(ctx, r3.ID, time.Minute); !errors.Is(err, budget.ErrLeaseLost) {
		t.Fatalf("renew of an expired reservation = %v; want ErrLeaseLost", err)
	}
}

func testReserveSeesPending(t *testing.T, newDB NewDB) {
	tr, _, _ := setup(t, newDB)
	SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "1h"}, 100)
	if err := tr.Record(ctx, ev("u", "k", "p", "m", 80, 0, T0)); err != nil {
		t.Fatal(err)
	}
	var ex *budget.ExceededError
	if _, err := tr.Reserve(ctx, budget.Request{Key: "k", Estimate: tokens(30)}, time.Minute); !errors.As(err, &ex) {
		t.Fatalf("Reserve over unflushed usage = %v; want ExceededError", err)
	}
	if _, err := tr.Reserve(ctx, budget.Request{Key: "k", Estimate: tokens(20)}, time.Minute); err != nil {
		t.Fatalf("Reserve that fits = %v", err)
	}
}
