package sqlite_test

import (
	"sync"
	"testing"

	"github.com/tokenbudget/tokenbudget/cache"
)

// A pinned counter re-acquired while the writer unpins it stays live: the
// counter Acquire returns is the one the LRU holds, and it takes deltas.
// The two goroutines race once per iteration; -stress runs ten times more.
func TestCountersReacquiredDuringUnpinStayLive(t *testing.T) {
	n := 2000
	if *stress {
		n = 20000
	}
	k, k2 := cache.Key{LimitID: "a"}, cache.Key{LimitID: "b"}
	for i := range n {
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
		if got.Dead() {
			t.Fatalf("iteration %d: Acquire(%v) returned a dead counter", i, k)
		}
		if p := cs.Peek(k); p != got {
			t.Fatalf("iteration %d: the LRU holds %p (dead %v) for %v; want the counter Acquire returned, %p", i, p, p != nil && p.Dead(), k, got)
		}
		if !got.AddPending(1) {
			t.Fatalf("iteration %d: AddPending on the re-acquired counter = false; want true", i)
		}
	}
}
