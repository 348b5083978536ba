package cache

import (
	lru "github.com/hashicorp/golang-lru/v2"
)

// Entry is a cached value with the instant (Unix nanos) it was loaded.
type Entry[V any] struct {
	Value    V
	LoadedAt int64
}

// Defs is a bounded LRU of definitions (a key's limits, a provider's
// parking state) that callers re-read after their refresh interval.
type Defs[K comparable, V any] struct {
	lru *lru.Cache[K, *Entry[V]]
}

// NewDefs returns a cache of at most size entries.
func NewDefs[K comparable, V any](size int) *Defs[K, V] {
	c, _ := lru.New[K, *Entry[V]](max(size, 1)) // only fails for size <= 0
	return &Defs[K, V]{lru: c}
}

// Peek returns the entry for k without touching recency (a shared lock).
func (d *Defs[K, V]) Peek(k K) (*Entry[V], bool) { return d.lru.Peek(k) }

// Put stores v as loaded at loadedAt.
func (d *Defs[K, V]) Put(k K, v V, loadedAt int64) {
	d.lru.Add(k, &Entry[V]{Value: v, LoadedAt: loadedAt})
}

// Remove forgets k.
func (d *Defs[K, V]) Remove(k K) { d.lru.Remove(k) }

// Purge forgets everything.
func (d *Defs[K, V]) Purge() { d.lru.Purge() }

// Len is the number of entries.
func (d *Defs[K, V]) Len() int { return d.lru.Len() }
