package budget_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/budget/internal/faultstore"
	"github.com/tokenbudget/tokenbudget/budget/internal/memstore"
)

// The writer on a memstore behind a faultstore, each test in a
// testing/synctest bubble: the writer's backoff timers run on the bubble's
// fake clock, so a test waits out no real backoff, even the default 5 s
// cap, and the bubble advances the clock only once every goroutine in it
// is blocked.

// errFull is what the faultstore's failing writes return.
var errFull = errors.New("database or disk is full (injected)")

// points are the places a write can fail; the writer must treat each the
// same way: retry the whole batch, drop nothing.
var points = []struct {
	name string
	p    faultstore.Point
}{{"begin", faultstore.Begin}, {"apply", faultstore.Apply}, {"commit", faultstore.Commit}}

// faultTracker is a Tracker (config changed by mod) on a fresh memstore
// behind a faultstore, with no sweep. It must be called inside the
// bubble; the test closes the tracker itself, before the bubble ends.
func faultTracker(t *testing.T, mod func(*budget.Config)) (*faultstore.Store, *budget.Tracker) {
	t.Helper()
	f := faultstore.New(memstore.New())
	cfg := budget.DefaultConfig()
	cfg.SweepInterval = -1
	if mod != nil {
		mod(&cfg)
	}
	tr, err := budget.New(ctx, f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f, tr
}

// stuck is faultTracker with every write failing at p from the start, its
// writer holding one event of key k in the failing batch.
func stuck(t *testing.T, p faultstore.Point, mod func(*budget.Config)) (*faultstore.Store, *budget.Tracker) {
	t.Helper()
	f, tr := faultTracker(t, mod)
	refused := f.Fail(p, faultstore.Forever, errFull)
	if err := tr.Record(ctx, budget.Usage{Key: "k", Provider: "p", Model: "m", Input: 1}); err != nil {
		t.Fatal(err)
	}
	<-refused
	return f, tr
}

// The wait between attempts at a failing batch starts at 10 ms, doubles,
// and stops growing at Config.MaxRetryBackoff (default 5 s).
func TestWriterMaxRetryBackoffCapsTheWait(t *testing.T) {
	for _, max := range []time.Duration{budget.DefaultMaxRetryBackoff, 40 * time.Millisecond} {
		t.Run(max.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const failures = 12
				f, tr := faultTracker(t, func(c *budget.Config) {
					c.MaxRetryBackoff = max
					c.FlushFailures = failures
				})
				f.Fail(faultstore.Begin, faultstore.Forever, errFull)
				if _, err := tr.RecordSync(ctx, budget.Usage{Key: "k", Provider: "p", Model: "m", Input: 1}); !errors.Is(err, errFull) {
					t.Fatalf("RecordSync after %d failures = %v; want %v", failures, err, errFull)
				}
				f.Heal()
				if _, err := tr.Flush(ctx); err != nil {
					t.Fatalf("Flush once healed: %v", err)
				}
				at := f.Attempts()
				if len(at) < failures+1 {
					t.Fatalf("%d write attempts; want at least %d", len(at), failures+1)
				}
				want := 10 * time.Millisecond
				for i := 1; i <= failures; i++ {
					if got := at[i].Sub(at[i-1]); got != min(want, max) {
						t.Errorf("wait before attempt %d = %v; want %v", i+1, got, min(want, max))
					}
					want *= 2
				}
				if err := tr.Close(ctx); err != nil {
					t.Fatalf("Close: %v", err)
				}
			})
		})
	}
}

// Flush queued behind a batch that keeps failing returns the error once
// the batch failed FlushFailures times, though the writer keeps the batch
// and writes it once the store recovers. (Moved from store/sqlite.)
func TestWriterFlushReportsErrorWhileWritesFail(t *testing.T) {
	for _, pt := range points {
		t.Run(pt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f, tr := stuck(t, pt.p, nil)
				if _, err := tr.Flush(ctx); !errors.Is(err, errFull) {
					t.Fatalf("Flush while every write fails = %v; want the store's error", err)
				}
				if err := tr.Health(); !errors.Is(err, budget.ErrUnhealthy) || !errors.Is(err, errFull) {
					t.Errorf("Health while every write fails = %v; want ErrUnhealthy with the store's error", err)
				}
				<-f.Heal()
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				if err := tr.Close(cctx); err != nil {
					t.Fatalf("Close after the store recovered = %v; want nil, the event written", err)
				}
				if st := tr.Stats(); st.Written != 1 || st.Failures < int64(budget.DefaultFlushFailures) || st.Retries != st.Failures {
					t.Fatalf("Stats = written %d, failures %d, retries %d; want 1 written, every failure (>= %d) retried",
						st.Written, st.Failures, st.Retries, budget.DefaultFlushFailures)
				}
				if err := tr.Health(); err != nil {
					t.Errorf("Health once the batch landed = %v; want nil", err)
				}
			})
		})
	}
}

// Close with a short deadline on an unwritable store gives up and says so;
// a concurrent Flush(context.Background()) then answers with an error
// instead of waiting forever. (Moved from store/sqlite.)
func TestWriterFlushAnswersAfterCloseGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, tr := stuck(t, faultstore.Begin, func(c *budget.Config) { c.FlushFailures = 1 << 20 })
		res := make(chan error, 1)
		go func() { _, err := tr.Flush(ctx); res <- err }()
		synctest.Wait() // the flush is queued
		cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel()
		if err := tr.Close(cctx); err == nil || !strings.Contains(err.Error(), "not written") {
			t.Errorf("Close that gave up on an unwritten event = %v; want an error", err)
		}
		if err := <-res; err == nil {
			t.Error("Flush whose events were given up = nil; want an error")
		}
	})
}

// While writes fail (reads still work), a Check of a window whose first
// event is stuck in the writer answers from the store and the queue
// instead of waiting for the writer. (Moved from store/sqlite.)
func TestWriterCheckAnswersWhileWritesFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, tr := faultTracker(t, func(c *budget.Config) { c.Now = func() time.Time { return bt0 } })
		max := int64(1000)
		l, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "1h", Max: &max})
		if err != nil {
			t.Fatal(err)
		}
		req := budget.Request{Key: "k"}
		if _, err := tr.Check(ctx, req); err != nil { // limits cached, this hour's counter loaded
			t.Fatal(err)
		}
		refused := f.Fail(faultstore.Apply, faultstore.Forever, errFull)
		next := bt0.Add(time.Hour) // the clock moved into the next window
		if err := tr.Record(ctx, budget.Usage{Key: "k", Provider: "p", Model: "m", Input: 1, At: next}); err != nil {
			t.Fatal(err)
		}
		<-refused // the writer holds the event in a failing batch
		d, err := tr.CheckAt(ctx, req, next)
		if err != nil || len(d.Limits) != 1 || d.Limits[0].Limit.ID != l.ID || d.Limits[0].Used != 1 {
			t.Fatalf("CheckAt while writes fail = %+v, %v; want limit %s with the queued event's 1 used", d.Limits, err, l.ID)
		}
		<-f.Heal()
		if _, err := tr.Flush(ctx); err != nil {
			t.Fatalf("Flush once writes work again = %v", err)
		}
		if u, err := tr.CheckAt(ctx, req, next); err != nil || u.Limits[0].Used != 1 {
			t.Fatalf("CheckAt after the event landed = %+v, %v; want 1 used", u.Limits, err)
		}
		if err := tr.Close(ctx); err != nil {
			t.Fatalf("Close: %v", err)
		}
	})
}

// With the store unwritable and the queue full, Close(ctx) returns once
// its ctx ends, reporting what it could not write, and Records blocked on
// the full queue return ErrClosed. (Moved from store/sqlite.)
func TestWriterCloseHonoursCtxWithQueueFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, tr := stuck(t, faultstore.Begin, func(c *budget.Config) { c.QueueSize = 1; c.BatchSize = 1 })
		u := budget.Usage{Key: "k", Provider: "p", Model: "m", Input: 1}
		if err := tr.Record(ctx, u); err != nil { // fills the queue
			t.Fatal(err)
		}
		blocked := make(chan error, 2)
		for range 2 {
			go func() { blocked <- tr.Record(ctx, u) }()
		}
		synctest.Wait() // both wait on the full queue
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if err := tr.Close(cctx); err == nil || !strings.Contains(err.Error(), "2 operations not written") {
			t.Errorf("Close with two events unwritable = %v; want an error counting them", err)
		}
		for range 2 {
			if err := <-blocked; !errors.Is(err, budget.ErrClosed) {
				t.Errorf("Record blocked on the full queue during Close = %v; want ErrClosed", err)
			}
		}
		if err := tr.Record(ctx, u); !errors.Is(err, budget.ErrClosed) {
			t.Errorf("Record after Close = %v; want ErrClosed", err)
		}
	})
}

// While every write fails, usage and commits wait in the writer, their
// callers and Health hear of the failure, and once the store heals
// everything lands: nothing recorded or committed is given up. (The writer
// half of store/sqlite's TestDiskFullThenSpaceBack, which keeps the real
// full disk.)
func TestWriterFailingStoreThenHealedDropsNothing(t *testing.T) {
	for _, pt := range points {
		t.Run(pt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f, tr := faultTracker(t, nil)
				max := int64(1 << 40)
				l, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "daily", Max: &max})
				if err != nil {
					t.Fatal(err)
				}
				var ids []string
				for range 20 {
					r, err := tr.ReserveWith(ctx, budget.Request{Key: "k", Estimate: budget.Estimate{Input: 10, Output: 10}},
						budget.ReserveOptions{OnExpiry: budget.ExpireCharge})
					if err != nil {
						t.Fatal(err)
					}
					ids = append(ids, r.ID)
				}
				f.Fail(pt.p, faultstore.Forever, errFull)
				const events = 200
				for i := range events {
					if err := tr.Record(ctx, budget.Usage{RequestID: fmt.Sprint("e", i), Key: "k", Provider: "p", Model: "m", Input: 1}); err != nil {
						t.Fatal(err)
					}
				}
				for _, id := range ids {
					if _, err := tr.Commit(ctx, id, budget.Usage{Input: 5, Output: 5}); !errors.Is(err, errFull) {
						t.Fatalf("Commit while every write fails = %v; want %v", err, errFull)
					}
				}
				if err := tr.Health(); !errors.Is(err, errFull) {
					t.Fatalf("Health while every write fails = %v; want the store's error", err)
				}
				<-f.Heal()
				if _, err := tr.Flush(ctx); err != nil {
					t.Fatalf("Flush once healed: %v", err)
				}
				d, err := tr.CheckAt(ctx, budget.Request{Key: "k"}, tr.Now())
				if err != nil {
					t.Fatal(err)
				}
				if got, want := d.Limits[0].Used, int64(events+20*10); got != want || d.Limits[0].Limit.ID != l.ID || d.Limits[0].Reserved != 0 {
					t.Fatalf("used %d, reserved %d once healed; want %d (every event and every commit), 0",
						got, d.Limits[0].Reserved, want)
				}
				if drift, err := tr.Verify(ctx); err != nil || len(drift) != 0 {
					t.Fatalf("Verify = %v, %v", drift, err)
				}
				if st := tr.Stats(); st.Written != events {
					t.Errorf("events written = %d; want %d", st.Written, events)
				}
				if err := tr.Close(ctx); err != nil {
					t.Fatalf("Close: %v", err)
				}
			})
		})
	}
}

// Close writes everything queued before it returns, batch by batch, even
// what queued while the writer was held on an earlier batch.
func TestWriterCloseDrainsTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, tr := faultTracker(t, func(c *budget.Config) { c.BatchSize = 8 })
		g := f.Gate()
		const events = 50
		for i := range events {
			if err := tr.Record(ctx, budget.Usage{RequestID: fmt.Sprint("e", i), Key: "k", Provider: "p", Model: "m", Input: 1}); err != nil {
				t.Fatal(err)
			}
		}
		<-g.Reached() // the first batch is held; the rest wait in the queue
		closed := make(chan error, 1)
		go func() { closed <- tr.Close(ctx) }()
		synctest.Wait() // Close is waiting on the writer
		g.Release()
		if err := <-closed; err != nil {
			t.Fatalf("Close = %v; want nil, everything written", err)
		}
		n := 0
		if err := f.View(ctx, func(tx budget.Tx) error {
			return tx.(budget.HistoryTx).Events(ctx, time.Time{}, time.Now().Add(time.Hour), "k", func(budget.Usage) error { n++; return nil })
		}); err != nil {
			t.Fatal(err)
		}
		if st := tr.Stats(); n != events || st.Written != events || st.Batches < 2 {
			t.Errorf("after Close: %d events stored, %d written in %d batches; want %d in several batches", n, st.Written, st.Batches, events)
		}
	})
}
