package budget_test

import (
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Under concurrent load a route takes its lease on its first request: 8
// routes' first reservations, queued behind a held write, land in one
// batch, and every route's second reservation is then answered from its
// lease in memory. (Waiting for a route's second request within LeaseIdle
// made leases depend on the writer's speed: a slow store kept every route
// of a large cycle off its lease.)
func TestLeaseTakenOnFirstRequestUnderLoad(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		f, tr := faultTracker(t, func(c *budget.Config) { c.Leases, c.LeaseJournal = true, dir })
		defer tr.Close(ctx)
		const routes = 8
		max := int64(1 << 40)
		for i := range routes {
			if _, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: "k" + strconv.Itoa(i), Window: "daily", Max: &max}); err != nil {
				t.Fatal(err)
			}
		}
		req := func(i int) budget.Request {
			return budget.Request{Key: "k" + strconv.Itoa(i), Estimate: budget.Estimate{Input: 10, Output: 10}}
		}
		// A first write holds the writer while the routes' first requests
		// queue behind it.
		g := f.Gate()
		held := make(chan error, 1)
		go func() { _, err := tr.RecordSync(ctx, budget.Usage{Key: "other", Input: 1}); held <- err }()
		<-g.Reached()
		errs := make(chan error, routes)
		for i := range routes {
			go func() {
				_, err := tr.Reserve(ctx, req(i), time.Minute)
				errs <- err
			}()
		}
		synctest.Wait() // every caller waits for its answer: all are queued
		if d := tr.Stats().QueueDepth; d != routes {
			t.Fatalf("queued behind the held write: %d; want %d", d, routes)
		}
		g.Release()
		if err := <-held; err != nil {
			t.Fatal(err)
		}
		for range routes {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		before := tr.Stats().Leased
		for i := range routes {
			if _, err := tr.Reserve(ctx, req(i), time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		if got := tr.Stats().Leased - before; got != routes {
			t.Fatalf("second requests answered from a lease: %d of %d; want all: each route took its lease in the contended batch", got, routes)
		}
	})
}

// In Durable mode leases are on, and every record a leased Reserve or
// Commit journals is on disk (fdatasync) before the call returns: each
// call made a sync, and nothing appended is left unsynced.
func TestDurableLeaseJournalSyncedBeforeReturn(t *testing.T) {
	_, tr := faultTracker(t, func(c *budget.Config) { c.Leases, c.LeaseJournal, c.Durable = true, t.TempDir(), true })
	defer tr.Close(ctx)
	max := int64(1 << 40)
	if _, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "daily", Max: &max}); err != nil {
		t.Fatal(err)
	}
	req := budget.Request{Key: "k", Estimate: budget.Estimate{Input: 10, Output: 10}}
	// The route's first request holds its own reservation, its second
	// takes the lease (journaled in the batch that creates it).
	for range 2 {
		if _, err := tr.Reserve(ctx, req, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		before, _ := budget.JournalSync(tr)
		r, err := tr.Reserve(ctx, req, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		syncs, synced := budget.JournalSync(tr)
		if syncs <= before || !synced {
			t.Fatalf("leased Reserve %d returned with %d syncs made (%d before), all synced %v; want its record on disk", i, syncs, before, synced)
		}
		if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 5, Output: 5}); err != nil {
			t.Fatal(err)
		}
		after, synced := budget.JournalSync(tr)
		if after <= syncs || !synced {
			t.Fatalf("leased Commit %d returned with %d syncs made (%d before), all synced %v; want its record on disk", i, after, syncs, synced)
		}
	}
	if n := tr.Stats().Leased; n < 5 {
		t.Fatalf("Durable tracker answered %d reservations from a lease; want leases on (at least 5)", n)
	}
}
