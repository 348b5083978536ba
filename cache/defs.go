package cache

import (
	"sync"
	"sync/atomic"

	lru "github.com/hashicorp/golang-lru/v2"
)

// Entry is a cached value with the instant (Unix nanos) it was loaded.
type Entry[V any] struct {
	Value    V
	LoadedAt int64
}

// Defs is a bounded cache of definitions (a key's limits, a provider's
// parking state) that callers re-read after their refresh interval.
//
// The LRU bounds it; reads go through a sync.Map mirror, which takes no
// lock at all, so checks on several cores do not contend on the LRU's
// read lock. Recency therefore follows insertion (re-reads re-insert).
type Defs[K comparable, V any] struct {
	lru *lru.Cache[K, *Entry[V]]
	idx sync.Map // K -> *Entry[V], exactly the entries the LRU holds
	mu  sync.Mutex
	gen atomic.Uint64 // moves on every change: see Gen
}

// NewDefs returns a cache of at most size entries.
func NewDefs[K comparable, V any](size int) *Defs[K, V] {
	d := &Defs[K, V]{}
	// The callback runs after the LRU's lock is released; CompareAndDelete
	// keeps a newer entry stored for the same key.
	d.lru, _ = lru.NewWithEvict(max(size, 1), func(k K, e *Entry[V]) { d.idx.CompareAndDelete(k, e) }) // only fails for size <= 0
	return d
}

// Peek returns the entry for k without any lock.
func (d *Defs[K, V]) Peek(k K) (*Entry[V], bool) {
	e, ok := d.idx.Load(k)
	if !ok {
		return nil, false
	}
	return e.(*Entry[V]), true
}

// Put stores v as loaded at loadedAt.
func (d *Defs[K, V]) Put(k K, v V, loadedAt int64) {
	e := &Entry[V]{Value: v, LoadedAt: loadedAt}
	d.mu.Lock() // orders the two structures against a concurrent Put or Remove of k
	d.idx.Store(k, e)
	d.lru.Add(k, e)
	d.gen.Add(1)
	d.mu.Unlock()
}

// Remove forgets k.
func (d *Defs[K, V]) Remove(k K) {
	d.mu.Lock()
	d.lru.Remove(k)
	d.idx.Delete(k)
	d.gen.Add(1)
	d.mu.Unlock()
}

// Purge forgets everything.
func (d *Defs[K, V]) Purge() {
	d.mu.Lock()
	d.lru.Purge()
	d.idx.Clear()
	d.gen.Add(1)
	d.mu.Unlock()
}

// Len is the number of entries.
func (d *Defs[K, V]) Len() int { return d.lru.Len() }

// Gen is a generation that moves on with every Put, Remove and Purge. An
// entry Peek returned after Gen read g is still the current one for its
// key while Gen is g, so a caller may keep the pointer and skip the
// lookup. Reading it writes nothing.
func (d *Defs[K, V]) Gen() uint64 { return d.gen.Load() }
