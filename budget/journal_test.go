package budget_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/budget/internal/faultstore"
	"github.com/tokenbudget/tokenbudget/budget/internal/memstore"
)

// A journal write that fails halfway hides no request answered after it.
// Tracker A (leases on, its writer writing only when a caller waits) takes
// a lease; one admission's record is then written in part and fails. The
// failure seals the lease's generation: that reservation is admitted by
// the store's path instead (carved from a new lease, in a new
// generation, as the pause after a failure is 0 here), the old lease's
// later commits are written to the store before they return, and a
// release that cannot be journaled is refused.
// A then dies with commits in its journals alone; recovery by B on the
// same machine charges every answered request exactly once: a committed
// one its actual usage, one in flight (ExpireCharge) its estimate.
func TestFailedJournalWriteHidesNoAnsweredRequest(t *testing.T) {
	mem := memstore.New()
	f := faultstore.New(mem)
	c := &testClock{t: time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)}
	dir := t.TempDir()
	a := storeTracker(t, f, func(cfg *budget.Config) {
		cfg.Now, cfg.Leases, cfg.LeaseJournal, cfg.BatchInterval = c.Now, true, dir, time.Hour
	})
	b := storeTracker(t, mem, func(cfg *budget.Config) { cfg.Now, cfg.LeaseJournal = c.Now, dir })
	max := int64(1 << 40)
	if _, _, err := b.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "daily", Max: &max}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "daily", Metric: "requests", Max: &max}); err != nil {
		t.Fatal(err)
	}
	req := budget.Request{Key: "k", Provider: "p", Model: "m", Estimate: budget.Estimate{Input: 40, Output: 60}}
	var want, requests int64 // what recovery must leave charged
	reserve := func() string {
		t.Helper()
		r, err := a.ReserveWith(ctx, req, budget.ReserveOptions{TTL: 20 * time.Second, OnExpiry: budget.ExpireCharge})
		if err != nil {
			t.Fatal(err)
		}
		requests++
		want += 100 // its estimate, unless committed
		return r.ID
	}
	n := int64(0)
	commit := func(id string) {
		t.Helper()
		n++
		u := budget.Usage{Input: 10 + n, Output: 20 + n}
		if _, err := a.Commit(ctx, id, u); err != nil {
			t.Fatal(err)
		}
		want += u.Billable() - 100
	}
	first := reserve() // the store's path: the route's first request
	commit(first)
	var old []string // carved from the first lease
	for range 6 {
		old = append(old, reserve())
	}
	commit(old[0])
	commit(old[1])
	leased := a.Stats().Leased
	if leased < 5 {
		t.Fatalf("carved from a lease before the failure: %d; want at least 5", leased)
	}
	// The next record is written in part, then the write fails.
	var failed atomic.Bool
	var real func(*os.File, []byte) (int, error)
	real = budget.SetJournalWrite(func(f *os.File, p []byte) (int, error) {
		if failed.CompareAndSwap(false, true) {
			n, _ := f.Write(p[:len(p)/2])
			return n, errors.New("no space left on device")
		}
		return real(f, p)
	})
	t.Cleanup(func() { budget.SetJournalWrite(real) })
	defer budget.SetJournalPause(budget.SetJournalPause(0)) // leases again at once
	after := reserve()
	if !failed.Load() {
		t.Fatal("the reservation after the injected failure wrote no record")
	}
	commit(old[2]) // its lease's generation is sealed: written to the store
	if err := a.Release(ctx, old[3]); !errors.Is(err, budget.ErrReleaseNotRecorded) {
		t.Fatalf("Release of a reservation whose journal is sealed: %v; want ErrReleaseNotRecorded (it is charged at its expiry, not retried)", err)
	}
	var carved []string // from the new lease, in a new generation
	for range 6 {
		carved = append(carved, reserve())
	}
	commit(after)
	commit(carved[0])
	commit(carved[1])
	commit(carved[2])
	if got := a.Stats().Leased - leased; got < 6 {
		t.Fatalf("carved after the failure: %d; want the new lease to serve (at least 6)", got)
	}
	if n := budget.JournalGens(a); n < 2 {
		t.Fatalf("journal generations: %d; want a new one after the failed write", n)
	}
	// A dies: its writer is held, the last commits in the journal alone.
	g := f.Gate()
	t.Cleanup(g.Release) // before A's Close
	c.Advance(time.Minute)
	if _, err := b.Recover(ctx, c.Now()); err != nil {
		t.Fatal(err)
	}
	rep, err := b.Inspect(ctx, "k", c.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range rep.Limits {
		got, w := st.Used, want
		if st.Limit.Metric == budget.MetricRequests {
			w = requests
		}
		if got != w || st.Reserved != 0 {
			t.Errorf("%s after A's failed write, death and recovery: used %d, reserved %d; want %d, 0 (each answered request charged once)",
				st.Limit.Metric, got, st.Reserved, w)
		}
	}
}

// A journal whose every write fails costs no caller an error: each
// reservation is answered by the store's path (a carve whose record
// failed is decided again there), each commit is written, and the store
// holds exactly what was committed, with no room left held once the
// leases ended. With no pause after a failure, every request tries a new
// lease first; with the pause, the routes keep to the store's path.
func TestFailingJournalStillAnswersEveryCaller(t *testing.T) {
	for _, pause := range []time.Duration{0, time.Hour} {
		t.Run(pause.String(), func(t *testing.T) {
			defer budget.SetJournalPause(budget.SetJournalPause(pause))
			real := budget.SetJournalWrite(func(f *os.File, p []byte) (int, error) {
				n, _ := f.Write(p[:len(p)/3])
				return n, errors.New("no space left on device")
			})
			defer func() { budget.SetJournalWrite(real) }()
			mem := memstore.New()
			a := storeTracker(t, mem, func(cfg *budget.Config) { cfg.Leases, cfg.LeaseJournal = true, t.TempDir() })
			max := int64(1 << 40)
			if _, _, err := a.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "daily", Max: &max}); err != nil {
				t.Fatal(err)
			}
			var used atomic.Int64
			errs := make(chan error, 8)
			for g := range 8 {
				go func() {
					for i := range 20 {
						r, err := a.Reserve(ctx, budget.Request{Key: "k", Estimate: budget.Estimate{Input: 40, Output: 60}}, time.Minute)
						if err != nil {
							errs <- err
							return
						}
						u := budget.Usage{Input: int64(g), Output: int64(i)}
						if _, err := a.Commit(ctx, r.ID, u); err != nil {
							errs <- err
							return
						}
						used.Add(u.Billable())
					}
					errs <- nil
				}()
			}
			for range 8 {
				if err := <-errs; err != nil {
					t.Fatalf("with every journal write failing: %v; want every call answered", err)
				}
			}
			if n := a.Stats().Leased; n != 0 {
				t.Fatalf("%d reservations answered from a lease whose journal failed", n)
			}
			if err := a.Close(ctx); err != nil {
				t.Fatal(err)
			}
			b := storeTracker(t, mem, nil)
			if got, reserved := usedReserved(t, b); got != used.Load() || reserved != 0 {
				t.Fatalf("after 160 reservations committed: used %d, reserved %d; want %d, 0", got, reserved, used.Load())
			}
		})
	}
}

// syncFailure is A (Durable, leased, on a faultstore over mem) and B on
// the same journal directory, with the route's first request taken by the
// store's path and committed (30 tokens), and the next journal sync
// failing once, calling onFail first; no new lease is taken after it.
type syncFailure struct {
	a, b   *budget.Tracker
	f      *faultstore.Store
	c      *testClock
	dir    string
	req    budget.Request
	opts   budget.ReserveOptions
	failed atomic.Bool
}

func newSyncFailure(t *testing.T, onFail func()) *syncFailure {
	t.Helper()
	mem := memstore.New()
	x := &syncFailure{f: faultstore.New(mem), c: &testClock{t: time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)}, dir: t.TempDir()}
	x.a = storeTracker(t, x.f, func(cfg *budget.Config) {
		cfg.Now, cfg.Leases, cfg.LeaseJournal, cfg.BatchInterval, cfg.Durable = x.c.Now, true, x.dir, time.Hour, true
	})
	x.b = storeTracker(t, mem, func(cfg *budget.Config) { cfg.Now, cfg.LeaseJournal = x.c.Now, x.dir })
	max := int64(1 << 40)
	if _, _, err := x.b.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "daily", Max: &max}); err != nil {
		t.Fatal(err)
	}
	x.req = budget.Request{Key: "k", Provider: "p", Model: "m", Estimate: budget.Estimate{Input: 40, Output: 60}}
	x.opts = budget.ReserveOptions{TTL: 20 * time.Second, OnExpiry: budget.ExpireCharge}
	first, err := x.a.ReserveWith(ctx, x.req, x.opts) // the store's path: the route's first request
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.a.Commit(ctx, first.ID, budget.Usage{Input: 10, Output: 20}); err != nil {
		t.Fatal(err)
	}
	real := budget.SetJournalSync(func(f *os.File) error {
		if x.failed.CompareAndSwap(false, true) {
			onFail()
			return errors.New("input/output error")
		}
		return nil
	})
	pause := budget.SetJournalPause(time.Hour) // no new lease after the failure
	t.Cleanup(func() { budget.SetJournalSync(real); budget.SetJournalPause(pause) })
	return x
}

// checkRefused fails t unless the carve's sync failed and no carve was
// answered from the lease.
func (x *syncFailure) checkRefused(t *testing.T) {
	t.Helper()
	if !x.failed.Load() || x.a.Stats().Leased != 0 {
		t.Fatalf("sync failed %v, %d carves answered from the lease; want the carve's sync to fail and the store to answer", x.failed.Load(), x.a.Stats().Leased)
	}
}

// recoverDead has A die before its writer gives the dead lease's room
// back, then B recover it a minute later, and returns B's used and
// reserved totals.
func (x *syncFailure) recoverDead(t *testing.T) (used, reserved int64) {
	t.Helper()
	g := x.f.Gate()
	t.Cleanup(g.Release) // before A's Close
	x.c.Advance(time.Minute)
	if _, err := x.b.Recover(ctx, x.c.Now()); err != nil {
		t.Fatal(err)
	}
	return usedReserved(t, x.b)
}

// Durable, a carve whose record was written but whose fdatasync failed is
// refused and reserved again on the store's path under the same id. That
// reservation, released, is charged nothing when its owner then dies
// before the dead lease ends: recovery by B on the same machine finds the
// journal's unsettled admission, and the store's row of the same id, and
// leaves the admission to the row. (Were the store's reservation given a
// new id, the admission would be charged its estimate.)
func TestFailedJournalSyncReleasedRequestChargedNothing(t *testing.T) {
	x := newSyncFailure(t, func() {})
	second, err := x.a.ReserveWith(ctx, x.req, x.opts) // carved, its sync fails: the store's path
	if err != nil {
		t.Fatal(err)
	}
	x.checkRefused(t)
	if err := x.a.Release(ctx, second.ID); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(x.dir)
	names := 0
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".journal") {
			names++
		}
	}
	if names != 1 {
		t.Fatalf("lease journal names when A dies: %d; want the dead lease's", names)
	}
	if used, reserved := x.recoverDead(t); used != 30 || reserved != 0 {
		t.Fatalf("after recovering A: used %d, reserved %d; want 30 (the released request charged nothing), 0", used, reserved)
	}
}

// Durable, a carve whose fdatasync failed while its caller's context was
// being cancelled is still decided again on the store's path (not cut
// short by the caller), and, the caller having gone, that reservation is
// released and the caller gets its context's error: recovery after the
// owner dies finds the journal's unsettled admission and the store's
// released row of the same id, and charges the request nothing. (Were the
// re-decision cut short, no row would tell recovery, and the request,
// whose Reserve failed, would be charged its estimate.)
func TestFailedJournalSyncCancelledCallerChargedNothing(t *testing.T) {
	callerCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	x := newSyncFailure(t, cancel) // the caller leaves as its carve's sync fails
	if r, err := x.a.ReserveWith(callerCtx, x.req, x.opts); !errors.Is(err, context.Canceled) {
		t.Fatalf("reserve whose caller left as its carve's sync failed: %v, %v; want context.Canceled", r, err)
	}
	x.checkRefused(t)
	if used, reserved := x.recoverDead(t); used != 30 || reserved != 0 {
		t.Fatalf("after recovering A: used %d, reserved %d; want 30 (the request whose Reserve failed charged nothing), 0", used, reserved)
	}
}
