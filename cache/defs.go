package cache

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// Entry is a cached value with the instant (Unix nanos) it was loaded.
type Entry[V any] struct {
	Value    V
	LoadedAt int64
}

// Defs is a bounded cache of definitions (a key's limits, a provider's
// parking state) that callers re-read after their refresh interval.
//
// Peek takes no lock and writes nothing but, once per sweep of the
// eviction clock, the entry's used mark, so checks on several cores do not
// contend; Put, Remove and Purge serialise on a mutex.
type Defs[K comparable, V any] struct {
	t   *table[K, Entry[V]]
	mu  sync.Mutex
	gen atomic.Uint64 // moves on every change: see Gen
}

// NewDefs returns a cache of at most size entries.
func NewDefs[K comparable, V any](size int) *Defs[K, V] {
	return &Defs[K, V]{t: newTable[K, Entry[V]](size, func(k K) uint64 { return maphash.Comparable(hashSeed, k) })}
}

// Peek returns the entry for k without any lock.
func (d *Defs[K, V]) Peek(k K) (*Entry[V], bool) {
	n := d.t.use(k)
	if n == nil {
		return nil, false
	}
	return &n.val, true
}

// Put stores v as loaded at loadedAt.
func (d *Defs[K, V]) Put(k K, v V, loadedAt int64) {
	d.mu.Lock()
	d.t.put(&node[K, Entry[V]]{key: k, val: Entry[V]{Value: v, LoadedAt: loadedAt}})
	d.gen.Add(1)
	d.mu.Unlock()
}

// Remove forgets k.
func (d *Defs[K, V]) Remove(k K) {
	d.mu.Lock()
	d.t.remove(k, nil)
	d.gen.Add(1)
	d.mu.Unlock()
}

// Purge forgets everything.
func (d *Defs[K, V]) Purge() {
	d.mu.Lock()
	d.t.clear()
	d.gen.Add(1)
	d.mu.Unlock()
}

// Len is the number of entries.
func (d *Defs[K, V]) Len() int { return int(d.t.live.Load()) }

// Gen is a generation that moves on with every Put, Remove and Purge. An
// entry Peek returned after Gen read g is still the current one for its
// key while Gen is g, so a caller may keep the pointer and skip the
// lookup. Reading it writes nothing.
func (d *Defs[K, V]) Gen() uint64 { return d.gen.Load() }
