package storetest

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tokenbudget/tokenbudget/budget"
)

// WarmLeases runs cycles of one pair per key (pair(k) for k in [0, keys))
// from goroutines goroutines until a whole cycle is answered from tr's
// leases (at most 5), after one sequential cycle: a leased benchmark then
// times the steady state, not its routes taking their leases (about one
// writer round trip each, which dominated a short run and made the result
// depend on b.N).
func WarmLeases(b *testing.B, tr *budget.Tracker, keys, goroutines int, pair func(k int) error) {
	b.Helper()
	for k := range keys {
		if err := pair(k); err != nil {
			b.Fatal(err)
		}
	}
	for range 5 {
		before := tr.Stats().Leased
		var next atomic.Int64
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				for k := int(next.Add(1) - 1); k < keys; k = int(next.Add(1) - 1) {
					if err := pair(k); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if tr.Stats().Leased-before >= int64(keys)*9/10 {
			return
		}
	}
}
