package cache_test

import (
	"sync"
	"testing"

	"github.com/tokenbudget/tokenbudget/cache"
)

func key(i int) cache.Key { return cache.Key{LimitID: "l", Start: int64(i)} }

func TestEvictionKeepsPendingDeltas(t *testing.T) {
	cs := cache.NewCounters(2)
	busy := cs.Acquire(key(0))
	if !busy.AddPending(42) {
		t.Fatal("AddPending on a live counter failed")
	}
	idle := cs.Acquire(key(1))
	for i := 2; i < 100; i++ { // push both out of a 2-entry cache
		cs.Acquire(key(i))
	}
	if got := cs.Acquire(key(0)); got != busy || got.Pending() != 42 {
		t.Fatalf("after eviction Acquire(busy) = %p pending %d; want the same counter %p with 42", got, got.Pending(), busy)
	}
	if idle.AddPending(1) {
		t.Fatal("AddPending on an evicted idle counter succeeded; the delta would be lost")
	}
	if got := cs.Acquire(key(1)); got == idle {
		t.Fatal("an evicted idle counter came back; want a fresh one")
	}
	if cs.Len() > 2 {
		t.Fatalf("Len = %d; want at most the size, 2", cs.Len())
	}
}

func TestUnpinAfterSettle(t *testing.T) {
	cs := cache.NewCounters(1)
	c := cs.Acquire(key(0))
	c.AddPending(5)
	c.BeginCommit()
	cs.Acquire(key(1)) // evicts key 0: pinned while busy
	c.EndCommit(5, 5, true)
	cs.Unpin(key(0), c)
	if c.AddPending(1) {
		t.Fatal("a settled, unpinned counter still took deltas")
	}
	if got := cs.Acquire(key(0)); got == c {
		t.Fatal("Acquire returned the unpinned counter")
	}
}

func TestRefreshRejectedAroundCommit(t *testing.T) {
	c := cache.NewCounters(4).Acquire(key(0))
	if !c.Refresh(c.Seq(), 100, nil, 1) {
		t.Fatal("first refresh not installed")
	}
	c.AddPending(10)
	seq := c.Seq()
	c.BeginCommit()
	// A read taken while the commit is in flight may or may not include it.
	if c.Refresh(c.Seq(), 110, nil, 2) {
		t.Fatal("refresh with an odd (in-flight) sequence was installed")
	}
	c.EndCommit(10, 10, true)
	if c.Refresh(seq, 110, nil, 3) {
		t.Fatal("refresh read before the commit was installed after it")
	}
	if got := c.Committed() + c.Pending(); got != 110 {
		t.Fatalf("committed+pending = %d; want 110 (the delta counted once)", got)
	}
	if !c.Refresh(c.Seq(), 115, nil, 4) || c.Committed() != 115 {
		t.Fatalf("a refresh after the commit was not installed: committed %d", c.Committed())
	}
}

func TestCommitOnUnloadedCounterKeepsItUnloaded(t *testing.T) {
	c := cache.NewCounters(4).Acquire(key(0))
	c.AddPending(7)
	c.BeginCommit()
	c.EndCommit(7, 7, true)
	if c.LoadedAt() != 0 || c.Committed() != 0 || c.Pending() != 0 {
		t.Fatalf("loadedAt %d committed %d pending %d; want an unloaded counter, nothing guessed", c.LoadedAt(), c.Committed(), c.Pending())
	}
}

func TestHoldsExpireAndDedupe(t *testing.T) {
	c := cache.NewCounters(4).Acquire(key(0))
	add := func(h cache.Hold) {
		c.UpdateHolds(func(cur []cache.Hold) []cache.Hold {
			for _, x := range cur {
				if x.ID == h.ID {
					return cur
				}
			}
			return append(cur, h)
		})
	}
	add(cache.Hold{ID: "a", Amount: 10, ExpiresAt: 100})
	add(cache.Hold{ID: "b", Amount: 5, ExpiresAt: 200})
	add(cache.Hold{ID: "a", Amount: 10, ExpiresAt: 100})
	if sum, n, next := c.Reserved(50); sum != 15 || n != 2 || next != 100 {
		t.Fatalf("Reserved(50) = %d, %d, %d; want 15, 2, 100", sum, n, next)
	}
	if sum, n, next := c.Reserved(100); sum != 5 || n != 1 || next != 200 {
		t.Fatalf("Reserved(100) = %d, %d, %d; want 5, 1, 200 (a hold stops at its expiry)", sum, n, next)
	}
}

func TestConcurrentAcquireAndPending(t *testing.T) {
	cs := cache.NewCounters(8)
	var wg sync.WaitGroup
	var total sync.Map
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				k := key((g + i) % 32)
				for {
					c := cs.Acquire(k)
					if c.AddPending(1) {
						v, _ := total.LoadOrStore(c, new(int64))
						_ = v
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	var sum int64
	for i := range 32 {
		sum += cs.Acquire(key(i)).Pending()
	}
	if sum != 8*2000 {
		t.Fatalf("pending across counters = %d; want %d (no delta lost to eviction)", sum, 8*2000)
	}
}

func TestDefs(t *testing.T) {
	d := cache.NewDefs[string, int](2)
	d.Put("a", 1, 10)
	d.Put("b", 2, 20)
	d.Put("c", 3, 30)
	_, a := d.Peek("a")
	_, b := d.Peek("b")
	if a == b || d.Len() != 2 {
		t.Fatalf("a 2-entry cache kept %d entries (a present: %v, b present: %v); want 2, one of a and b evicted", d.Len(), a, b)
	}
	if e, ok := d.Peek("c"); !ok || e.Value != 3 || e.LoadedAt != 30 {
		t.Fatalf("Peek(c) = %+v, %v", e, ok)
	}
	d.Remove("c")
	if _, ok := d.Peek("c"); ok {
		t.Fatal("Remove did not remove")
	}
}

// A queued event keeps its counters without their keys: the writer reads
// each counter's key back from it, including a busy counter pinned aside
// by eviction and brought back.
func TestCounterKnowsItsKey(t *testing.T) {
	cs := cache.NewCounters(2)
	k := cache.Key{LimitID: "lim-1", Subject: "key-7" + "\x1fuser", Start: 1_700_000_000}
	busy := cs.Acquire(k)
	busy.AddPending(1)
	for i := range 50 { // evicts k's counter, which is pinned: it is busy
		if c := cs.Acquire(key(i)); c.Key() != key(i) {
			t.Fatalf("Acquire(%v).Key() = %v", key(i), c.Key())
		}
	}
	if busy.Key() != k {
		t.Fatalf("pinned counter's Key() = %v; want %v", busy.Key(), k)
	}
	if c := cs.Acquire(k); c != busy || c.Key() != k {
		t.Fatalf("Acquire after pinning = %p with key %v; want %p with %v", c, c.Key(), busy, k)
	}
}

// A holds change made after a refresh read began moves seq on, so that
// read, which may not include the change, is not installed over it.
func TestRefreshRejectedAfterHoldsChange(t *testing.T) {
	c := cache.NewCounters(4).Acquire(key(0))
	seq := c.Seq()
	c.UpdateHolds(func(h []cache.Hold) []cache.Hold {
		return append(h, cache.Hold{ID: "r1", Amount: 7, ExpiresAt: 100})
	})
	if c.Refresh(seq, 50, nil, 1) {
		t.Fatal("a refresh read taken before a holds change was installed")
	}
	if sum, n, _ := c.Reserved(0); sum != 7 || n != 1 || c.LoadedAt() != 0 {
		t.Fatalf("after the rejected refresh: reserved %d in %d holds, loaded at %d; want 7 in 1, 0", sum, n, c.LoadedAt())
	}
	if !c.Refresh(c.Seq(), 50, nil, 1) || c.Used() != 50 {
		t.Fatalf("a refresh taken after the change was not installed: used %d", c.Used())
	}
}
