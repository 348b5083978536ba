package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func init() {
	extra = append(extra,
		suiteCase{"AmbiguousCommitChargesOnce", testAmbiguousCommit},
		suiteCase{"AmbiguousCommitPastFlushFailures", testAmbiguousCommitTold},
	)
}

// LostAck wraps a store so that its next write transactions commit and then
// report a failure, as a connection cut right after the server's COMMIT
// does, or fail before they run, as a refused connection does.
type LostAck struct {
	budget.Store
	mu         sync.Mutex
	lose, down int
}

// ErrLostAck is what a transaction that committed reports.
var ErrLostAck = errors.New("storetest: connection lost after COMMIT")

// ErrDown is what a transaction that never ran reports.
var ErrDown = errors.New("storetest: connection refused")

// Lose makes the next n write transactions that succeed report ErrLostAck.
func (s *LostAck) Lose(n int) { s.mu.Lock(); s.lose = n; s.mu.Unlock() }

// Down makes the next n write transactions fail with ErrDown, unrun.
func (s *LostAck) Down(n int) { s.mu.Lock(); s.down = n; s.mu.Unlock() }

func (s *LostAck) Update(ctx context.Context, fn func(budget.Tx) error) error {
	// Losses come first: Lose(1) then Down(1) is a try that lands
	// unanswered followed by one that cannot reach the store.
	s.mu.Lock()
	lose := s.lose > 0
	down := !lose && s.down > 0
	switch {
	case lose:
		s.lose--
	case down:
		s.down--
	}
	s.mu.Unlock()
	if down {
		return ErrDown
	}
	err := s.Store.Update(ctx, fn)
	if err == nil && lose {
		return ErrLostAck
	}
	return err
}

func newLostAckTracker(t *testing.T, newDB NewDB, flushFailures int) (*budget.Tracker, *LostAck, *Clock) {
	t.Helper()
	s := &LostAck{Store: newDB(t)()}
	c := NewClock(T0)
	cfg := budget.DefaultConfig()
	cfg.Now = c.Now
	cfg.RefreshInterval = time.Second
	cfg.SweepInterval = -1
	cfg.FlushFailures = flushFailures
	tr, err := budget.New(context.Background(), s, cfg)
	if err != nil {
		t.Fatalf("budget.New: %v", err)
	}
	t.Cleanup(func() {
		if err := tr.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return tr, s, c
}

// A batch whose COMMIT landed but whose answer was lost is retried without
// doing anything twice: the reservation keeps the id its caller gets (no
// orphan holding, then charged at expiry), the commit is answered as
// committed (not "already settled"), and every request counts once.
func testAmbiguousCommit(t *testing.T, newDB NewDB) {
	tr, s, c := newLostAckTracker(t, newDB, budget.DefaultFlushFailures)
	tok := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "daily"}, 1000)
	reqs := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "daily", Metric: "requests"}, 1000)
	req := budget.Request{Key: "k", Provider: "p", Model: "m", Estimate: budget.Estimate{Input: 60, Output: 40}}

	s.Lose(1)
	r, err := tr.ReserveWith(ctx, req, charge(time.Minute))
	if err != nil {
		t.Fatalf("Reserve whose commit landed = %v; want the reservation", err)
	}
	if u, res := Used(t, tr, budget.Request{Key: "k"}, c.Now(), tok.ID); u != 0 || res != 100 {
		t.Fatalf("after a reservation retried: used/reserved = %d/%d; want 0/100", u, res)
	}
	s.Lose(1)
	if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 30, Output: 10}); err != nil {
		t.Fatalf("Commit whose commit landed = %v; want committed", err)
	}
	s.Lose(1)
	if _, err := tr.RecordSync(ctx, ev("e1", "k", "p", "m", 5, 0, c.Now())); err != nil {
		t.Fatalf("RecordSync whose commit landed = %v", err)
	}
	check := func(when string) {
		t.Helper()
		if u, res := Used(t, tr, budget.Request{Key: "k"}, c.Now(), tok.ID); u != 45 || res != 0 {
			t.Fatalf("%s: tokens used/reserved = %d/%d; want 45/0", when, u, res)
		}
		if u, _ := Used(t, tr, budget.Request{Key: "k"}, c.Now(), reqs.ID); u != 2 {
			t.Fatalf("%s: requests used = %d; want 2 (one commit, one event)", when, u)
		}
	}
	check("after three lost answers")
	c.Advance(5 * time.Minute)
	res, err := tr.Recover(ctx, c.Now())
	if err != nil {
		t.Fatal(err)
	}
	if res.ReleasedReservations != 0 || res.ChargedReservations != 0 {
		t.Fatalf("Recover = %+v; want nothing left to recover", res)
	}
	check("after recovery")
	noDrift(t, tr)
}

// Past FlushFailures the caller of a reservation hears of the failure: if
// the try that failed did land, its reservation is released, not left live
// to hold its estimate and be charged at expiry.
func testAmbiguousCommitTold(t *testing.T, newDB NewDB) {
	tr, s, c := newLostAckTracker(t, newDB, 2)
	tok := SetLimit(t, tr, budget.LimitSpec{Key: "k", Window: "daily"}, 1000)
	s.Lose(1) // the first try lands unanswered,
	s.Down(1) // the second never runs: the caller is told
	if _, err := tr.ReserveWith(ctx, budget.Request{Key: "k", Estimate: tokens(100)}, charge(time.Minute)); !errors.Is(err, ErrDown) {
		t.Fatalf("Reserve after %d failures = %v; want %v", 2, err, ErrDown)
	}
	if _, err := tr.Flush(ctx); err != nil {
		t.Fatalf("Flush once the store answers: %v", err)
	}
	if u, res := Used(t, tr, budget.Request{Key: "k"}, c.Now(), tok.ID); u != 0 || res != 0 {
		t.Fatalf("after a reservation its caller was told failed: used/reserved = %d/%d; want 0/0", u, res)
	}
	c.Advance(5 * time.Minute)
	res, err := tr.Recover(ctx, c.Now())
	if err != nil {
		t.Fatal(err)
	}
	if res.ReleasedReservations != 0 || res.ChargedReservations != 0 {
		t.Fatalf("Recover = %+v; want nothing left to recover", res)
	}
	if u, _ := Used(t, tr, budget.Request{Key: "k"}, c.Now(), tok.ID); u != 0 {
		t.Fatalf("after recovery: used %d; want 0", u)
	}
	noDrift(t, tr)
}
