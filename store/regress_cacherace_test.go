package store_test

import (
	"sync"
	"testing"

	"github.com/tokenbudget/tokenbudget/cache"
)

// A pinned counter being re-acquired while the writer unpins it can end up
// in the LRU marked dead; AddPending on it then fails forever.
func TestUnpinAcquireRace(t *testing.T) {
	k, k2 := cache.Key{LimitID: "a"}, cache.Key{LimitID: "b"}
	for i := 0; i < 20000; i++ {
		cs := cache.NewCounters(1)
		c := cs.Acquire(k)
		c.AddPending(1)
		c.BeginCommit()
		cs.Acquire(k2) // evicts k while busy: pinned
		var wg sync.WaitGroup
		start := make(chan struct{})
		var got *cache.Counter
		wg.Add(2)
		go func() { defer wg.Done(); <-start; c.EndCommit(1, 1, true); cs.Unpin(k, c) }()
		go func() { defer wg.Done(); <-start; got = cs.Acquire(k) }()
		close(start)
		wg.Wait()
		if p := cs.Peek(k); p != nil && p.Dead() {
			ok := p.AddPending(1)
			t.Fatalf("iteration %d: the LRU holds a dead counter for %v (AddPending -> %v; Acquire returns it again: %v)", i, k, ok, cs.Acquire(k) == p)
		}
		_ = got
	}
}
