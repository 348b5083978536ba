package budget_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/budget/internal/faultstore"
	"github.com/tokenbudget/tokenbudget/budget/internal/memstore"
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

// testClock is a clock a test moves.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *testClock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// usedReserved is key k's first limit's usage and holds as tr inspects
// them.
func usedReserved(t *testing.T, tr *budget.Tracker) (int64, int64) {
	t.Helper()
	rep, err := tr.Inspect(ctx, "k", tr.Now(), 0)
	if err != nil || len(rep.Limits) == 0 {
		t.Fatalf("Inspect = %+v, %v", rep, err)
	}
	return rep.Limits[0].Used, rep.Limits[0].Reserved
}

// A lease whose owner died on one machine and which a replica on another
// machine charged whole (it could not read the journal) leaves the
// owner's journal name behind. A tracker on the owner's machine finds it
// at its next Recover: the commit the journal holds but the history does
// not adds what it exceeds its estimate by, as <id>:late (the whole
// charge covered it at its estimate), and the name is removed. Each
// request is charged once: the owner's own late write, when it resumes,
// adds nothing more.
func TestStaleJournalSettledAndRemoved(t *testing.T) {
	mem := memstore.New()
	f := faultstore.New(mem)
	c := &testClock{t: time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)}
	dirA, dirB := t.TempDir(), t.TempDir()
	a := storeTracker(t, f, func(cfg *budget.Config) { cfg.Now, cfg.Leases, cfg.LeaseJournal = c.Now, true, dirA })
	b := storeTracker(t, mem, func(cfg *budget.Config) { cfg.Now, cfg.LeaseJournal = c.Now, dirB }) // another machine
	max := int64(100_000)
	if _, _, err := b.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "daily", Max: &max}); err != nil {
		t.Fatal(err)
	}
	req := budget.Request{Key: "k", Provider: "p", Model: "m", Estimate: budget.Estimate{Input: 50, Output: 50}}
	var ids []string
	for range 3 { // the first on the store's path, then a lease
		r, err := a.Reserve(ctx, req, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	_, reserved := usedReserved(t, b)
	lease := reserved - 100 // the first request's own reservation aside
	// A's writer is held: its commit is journaled and answered, its event
	// never written. Then A is as good as dead.
	g := f.Gate()
	t.Cleanup(g.Release) // before A's Close, should the test stop early
	if _, err := a.Commit(ctx, ids[2], budget.Usage{Input: 100, Output: 70}); err != nil {
		t.Fatal(err)
	}
	<-g.Reached()
	c.Advance(30 * time.Second)
	if _, err := b.Recover(ctx, c.Now()); err != nil {
		t.Fatal(err)
	}
	if used, reserved := usedReserved(t, b); used != lease || reserved != 0 {
		t.Fatalf("after B charged A's lease whole: used %d, reserved %d; want %d (the rest of the lease), 0", used, reserved, lease)
	}
	names := func() (journals []string) {
		entries, _ := os.ReadDir(dirA)
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".journal") {
				journals = append(journals, e.Name())
			}
		}
		return journals
	}
	if n := names(); len(n) != 1 {
		t.Fatalf("A's journal names before the sweep on its machine: %v; want its lease's", n)
	}
	// A tracker on A's machine (A restarting) sweeps.
	c2 := storeTracker(t, mem, func(cfg *budget.Config) { cfg.Now, cfg.LeaseJournal = c.Now, dirA })
	if _, err := c2.Recover(ctx, c.Now()); err != nil {
		t.Fatal(err)
	}
	if n := names(); len(n) != 0 {
		t.Fatalf("journal names left after the sweep: %v; want none", n)
	}
	if used, _ := usedReserved(t, b); used != lease+70 {
		t.Fatalf("after the sweep: used %d; want %d (the whole charge and the commit's 70 over its estimate)", used, lease+70)
	}
	// A wakes: its commit's late event is the one the sweep wrote.
	g.Release()
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if used, _ := usedReserved(t, b); used != lease+70 {
		t.Fatalf("after A's own late write: used %d; want still %d (charged once)", used, lease+70)
	}
}

// Journal generations rotate: a lease of a full generation carves once
// more (its record lands in the full one, which its name links) and is
// then replaced, in a new generation; the old generation's own name goes
// at once, and once every lease has ended (Close) no name is left in the
// directory.
func TestJournalGenerationsRotate(t *testing.T) {
	defer budget.SetGenMax(budget.SetGenMax(1)) // every new lease rotates
	dir := t.TempDir()
	_, tr := faultTracker(t, func(c *budget.Config) { c.Leases, c.LeaseJournal = true, dir })
	max := int64(1 << 40)
	for _, k := range []string{"a", "b"} {
		if _, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: k, Window: "daily", Max: &max}); err != nil {
			t.Fatal(err)
		}
	}
	gens := func() (n int, journals int) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			switch {
			case strings.HasSuffix(e.Name(), ".gen"):
				n++
			case strings.HasSuffix(e.Name(), ".journal"):
				journals++
			}
		}
		return n, journals
	}
	for _, k := range []string{"a", "b"} { // each route's second request takes a lease
		for range 2 {
			r, err := tr.Reserve(ctx, budget.Request{Key: k, Estimate: budget.Estimate{Input: 10}}, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 5}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n, j := gens(); n != 1 || j != 2 {
		t.Fatalf("after two leases in generations of one byte: %d generation names, %d journal names; want 1 (the current) and 2", n, j)
	}
	// Route a's lease is of a full generation: it carves once more, and
	// the next request takes a new lease, in a new generation (full too:
	// one byte), and so on.
	before, gensBefore := tr.Stats().Leased, budget.JournalGens(tr)
	for range 100 {
		r, err := tr.Reserve(ctx, budget.Request{Key: "a", Estimate: budget.Estimate{Input: 10}}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 5}); err != nil {
			t.Fatal(err)
		}
	}
	if got := tr.Stats().Leased - before; got < 45 || got > 50 {
		t.Fatalf("leased in one-byte generations: %d of 100; want one in two (each lease carves once, then is replaced)", got)
	}
	if n := budget.JournalGens(tr) - gensBefore; n < 45 {
		t.Fatalf("generations started for 100 requests: %d; want one per lease (about 50)", n)
	}
	if err := tr.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n, j := gens(); n != 0 || j != 0 {
		t.Fatalf("after Close: %d generation names, %d journal names; want none", n, j)
	}
}

// A lease that sits idle is given back by its Tracker's own timer, no call
// made: still held just before LeaseIdle of its last use, none of its room
// held a look (250 ms) after LeaseIdle, as another tracker reads the store.
func TestIdleLeaseGivenBackByItsTimer(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		a := storeTracker(t, mem, func(c *budget.Config) { c.Leases, c.LeaseJournal = true, dir })
		b := storeTracker(t, mem, nil)
		max := int64(100_000)
		if _, _, err := b.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "daily", Max: &max}); err != nil {
			t.Fatal(err)
		}
		for range 3 { // the route's first request holds its own reservation, then the lease
			r, err := a.Reserve(ctx, budget.Request{Key: "k", Estimate: budget.Estimate{Input: 50, Output: 50}}, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.Commit(ctx, r.ID, budget.Usage{Input: 50, Output: 50}); err != nil {
				t.Fatal(err)
			}
		}
		if a.Stats().Leased == 0 {
			t.Fatal("no reservation came from a lease")
		}
		lastUse := time.Now()
		time.Sleep(10 * time.Millisecond) // the commits' batch (BatchInterval)
		synctest.Wait()
		used, held := usedReserved(t, b)
		if used != 300 || held == 0 {
			t.Fatalf("after the load: used %d, reserved %d; want 300 and the lease's free room held", used, held)
		}
		time.Sleep(budget.LeaseIdle - 50*time.Millisecond - time.Since(lastUse))
		synctest.Wait()
		if _, still := usedReserved(t, b); still != held {
			t.Fatalf("%v after the lease's last use: reserved %d; want still %d (not idle yet)", time.Since(lastUse), still, held)
		}
		time.Sleep(time.Until(lastUse.Add(budget.LeaseIdle + 250*time.Millisecond + 10*time.Millisecond)))
		synctest.Wait()
		if used, left := usedReserved(t, b); used != 300 || left != 0 {
			t.Fatalf("%v after the lease's last use: used %d, reserved %d; want 300, 0 (the idle lease's room given back by its timer)",
				time.Since(lastUse), used, left)
		}
	})
}

// A busy lease that is never refilled (every reservation released, so its
// room comes back) does not grow its journal's file without end: once its
// generation is full it carves no more, its route takes a new lease in a
// new generation, and every generation ends within a record or two of the
// size limit; once the old leases ended (Flush), their files are gone.
func TestBusyLeaseJournalBounded(t *testing.T) {
	const limit = 4096
	defer budget.SetGenMax(budget.SetGenMax(limit))
	dir := t.TempDir()
	_, tr := faultTracker(t, func(c *budget.Config) { c.Leases, c.LeaseJournal = true, dir })
	defer tr.Close(ctx)
	max := int64(1 << 40)
	if _, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "daily", Max: &max}); err != nil {
		t.Fatal(err)
	}
	// files is the size of every distinct file a name in dir links to.
	files := func() (sizes []int64) {
		t.Helper()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var seen []os.FileInfo
	next:
		for _, e := range entries {
			fi, err := os.Stat(filepath.Join(dir, e.Name()))
			if err != nil {
				continue // removed meanwhile
			}
			for _, s := range seen {
				if os.SameFile(s, fi) {
					continue next
				}
			}
			seen = append(seen, fi)
			sizes = append(sizes, fi.Size())
		}
		return sizes
	}
	const pairs = 2000 // about 130 bytes of records each: 60 generations' worth
	for i := range pairs {
		r, err := tr.Reserve(ctx, budget.Request{Key: "k", Estimate: budget.Estimate{Input: 10}}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Release(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			for _, n := range files() {
				if n > limit+512 {
					t.Fatalf("after %d reservations released: a journal file of %d bytes; want at most %d and a record or two", i+1, n, limit)
				}
			}
		}
	}
	if got := tr.Stats().Leased; got < pairs*9/10 {
		t.Fatalf("answered from leases: %d of %d; want nearly all", got, pairs)
	}
	if n := budget.JournalGens(tr); n < 30 {
		t.Fatalf("generations started: %d; want a new one each time one filled (about 60)", n)
	}
	if _, err := tr.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if sizes := files(); len(sizes) > 2 {
		t.Fatalf("journal files left after the flush: %v; want the current generation's and at most one lease's still ending", sizes)
	}
}

// crashAfterLease is a store whose write transaction that creates a lease
// row commits and then never returns to its writer: the process died
// between the lease row's commit and anything its writer does after it.
type crashAfterLease struct {
	budget.Store
	hit  chan struct{} // closed once such a transaction committed
	hold chan struct{} // closed by the test's cleanup
	once sync.Once
}

func (s *crashAfterLease) Update(ctx context.Context, fn func(budget.Tx) error) error {
	created := false
	err := s.Store.Update(ctx, func(tx budget.Tx) error { return fn(&leaseSpyTx{fullTx: tx.(fullTx), created: &created}) })
	if err == nil && created {
		s.once.Do(func() { close(s.hit) })
		<-s.hold
	}
	return err
}

// fullTx is every role of memstore's transaction, which leaseSpyTx
// passes on.
type fullTx interface {
	budget.Tx
	budget.HistoryTx
	budget.OutboxTx
	budget.ProviderTx
	budget.AlertTx
	budget.AuditTx
}

// leaseSpyTx notes a write set that creates a lease row.
type leaseSpyTx struct {
	fullTx
	created *bool
}

func (t *leaseSpyTx) Apply(ctx context.Context, ws *budget.WriteSet) ([]bool, int64, error) {
	for _, r := range ws.NewReservations {
		if strings.HasPrefix(r.ID, "lse_") {
			*t.created = true
		}
	}
	return t.fullTx.Apply(ctx, ws)
}

// A process killed right after a new lease's row committed, before its
// writer went on, left the lease's journal name (linked before the row
// was written), so recovery on its machine reads the journal and charges
// only what was served: nothing from the lease, none of whose carves was
// answered. (Were the name linked after the commit, recovery would find
// none and charge the lease whole.)
func TestLeaseKilledAfterItsRowCommittedChargesNothingUnserved(t *testing.T) {
	mem := memstore.New()
	s := &crashAfterLease{Store: mem, hit: make(chan struct{}), hold: make(chan struct{})}
	c := &testClock{t: time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)}
	dir := t.TempDir()
	a := storeTracker(t, s, func(cfg *budget.Config) {
		cfg.Now, cfg.Leases, cfg.LeaseJournal = c.Now, true, dir
	})
	t.Cleanup(func() { close(s.hold) }) // before A's Close
	b := storeTracker(t, mem, func(cfg *budget.Config) { cfg.Now, cfg.LeaseJournal = c.Now, dir })
	max := int64(1 << 40)
	if _, _, err := b.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "daily", Max: &max}); err != nil {
		t.Fatal(err)
	}
	req := budget.Request{Key: "k", Provider: "p", Model: "m", Estimate: budget.Estimate{Input: 50, Output: 50}}
	first, err := a.ReserveWith(ctx, req, budget.ReserveOptions{TTL: 20 * time.Second, OnExpiry: budget.ExpireCharge})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Commit(ctx, first.ID, budget.Usage{Input: 10, Output: 20}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// The route's next requests take a lease; its row commits, and A dies.
	for range 4 {
		go a.ReserveWith(ctx, req, budget.ReserveOptions{TTL: 20 * time.Second, OnExpiry: budget.ExpireCharge})
	}
	select {
	case <-s.hit:
	case <-time.After(time.Minute):
		t.Fatal("no write transaction created a lease row")
	}
	if _, reserved := usedReserved(t, b); reserved == 0 {
		t.Fatal("the lease row committed holds nothing")
	}
	c.Advance(time.Minute)
	res, err := b.Recover(ctx, c.Now())
	if err != nil {
		t.Fatal(err)
	}
	if used, reserved := usedReserved(t, b); used != 30 || reserved != 0 || res.UnjournaledLeases != 0 {
		t.Fatalf("after recovering the lease of a process killed at its row's commit: used %d, reserved %d, %d leases without a journal; want 30 (the one answered), 0, 0",
			used, reserved, res.UnjournaledLeases)
	}
}

// A lease's journal name is linked before its row is committed, so a
// sweep that finds a name without a row keeps it (it may be a lease being
// created, by this process or another) until it has stayed without a row
// for a minute (staleRecheck); then it goes.
func TestRowlessJournalNameKeptUntilItStaysRowless(t *testing.T) {
	c := &testClock{t: time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)}
	dir := t.TempDir()
	b := storeTracker(t, memstore.New(), func(cfg *budget.Config) { cfg.Now, cfg.LeaseJournal = c.Now, dir })
	name := filepath.Join(dir, "lse_18eef71e9bcc243aeff6a2e135e7.journal")
	if err := os.WriteFile(name, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	exists := func() bool { _, err := os.Stat(name); return err == nil }
	for _, d := range []time.Duration{0, 30 * time.Second, 59 * time.Second} {
		if _, err := b.Recover(ctx, c.Now().Add(d)); err != nil {
			t.Fatal(err)
		}
		if !exists() {
			t.Fatalf("a journal name without a row, %s after it was first seen: removed; want it kept for a minute (its lease may be being created)", d)
		}
	}
	if _, err := b.Recover(ctx, c.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if exists() {
		t.Fatal("a journal name without a row for a minute: kept; want it removed")
	}
}
