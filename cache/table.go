package cache

import (
	"hash/maphash"
	"sync/atomic"
)

// table is the bounded hash table under Counters and Defs: open addressing
// over an array of node pointers, at most half full, read without any lock
// and written by one writer at a time (the caller's lock). An entry costs
// its node and two slots, where golang-lru cost a list element, a map
// entry and, for Defs, a sync.Map node besides.
//
// Readers load the slot array once and probe it with atomic loads; a
// writer replaces a slot's pointer (insert, delete as a tombstone) or, when
// tombstones pile up or the table grows, builds a new array and publishes
// it whole, so a reader sees either array, each consistent. A reader that
// misses an entry inserted meanwhile takes its caller's slow path, as a
// miss just before the insert would.
//
// Eviction is CLOCK: a node's ref bit is set when it is used (once per
// sweep, so a hot entry is not written on every read) and the hand passes
// over set bits, clearing them, to the first node not used since it last
// passed.
type table[K comparable, V any] struct {
	slots atomic.Pointer[slotArray[K, V]]
	hash  func(K) uint64
	tomb  *node[K, V] // a deleted slot: probing goes on past it
	size  int         // the most live nodes
	live  atomic.Int64
	used  int // live nodes and tombstones in the current array
	hand  int
}

type slotArray[K comparable, V any] struct {
	s    []atomic.Pointer[node[K, V]]
	mask uint64
}

type node[K comparable, V any] struct {
	key K
	ref atomic.Bool // used since the clock hand last passed
	val V
}

// minSlots is a new table's array: it doubles as entries arrive, up to
// twice the size rounded up to a power of two.
const minSlots = 16

func newTable[K comparable, V any](size int, hash func(K) uint64) *table[K, V] {
	t := &table[K, V]{hash: hash, tomb: new(node[K, V]), size: max(size, 1)}
	t.slots.Store(newSlots[K, V](minSlots))
	return t
}

func newSlots[K comparable, V any](n int) *slotArray[K, V] {
	return &slotArray[K, V]{s: make([]atomic.Pointer[node[K, V]], n), mask: uint64(n - 1)}
}

// get returns k's node or nil, without a lock.
func (t *table[K, V]) get(k K) *node[K, V] {
	_, n := t.find(t.slots.Load(), k)
	return n
}

// find probes a for k: its slot and node, or a nil node.
func (t *table[K, V]) find(a *slotArray[K, V], k K) (uint64, *node[K, V]) {
	for i := t.hash(k) & a.mask; ; i = (i + 1) & a.mask {
		n := a.s[i].Load()
		if n == nil {
			return i, nil
		}
		if n != t.tomb && n.key == k {
			return i, n
		}
	}
}

// touch marks n used, writing its line only when the mark is not set yet.
func (n *node[K, V]) touch() {
	if !n.ref.Load() {
		n.ref.Store(true)
	}
}

// put stores n under n.key, replacing the node there (returned as old),
// else inserting and, when the table holds size nodes already, evicting
// the clock's victim first (returned as evicted). Writers only.
func (t *table[K, V]) put(n *node[K, V]) (old, evicted *node[K, V]) {
	a := t.slots.Load()
	free := -1
	for i := t.hash(n.key) & a.mask; ; i = (i + 1) & a.mask {
		cur := a.s[i].Load()
		if cur == nil {
			if free < 0 {
				free = int(i)
			}
			break
		}
		if cur == t.tomb {
			if free < 0 {
				free = int(i)
			}
			continue
		}
		if cur.key == n.key {
			a.s[i].Store(n)
			return cur, nil
		}
	}
	if int(t.live.Load()) >= t.size {
		evicted = t.evict() // a tombstone where it was: free stays free
	}
	if a.s[free].Load() == nil {
		t.used++
	}
	a.s[free].Store(n)
	t.live.Add(1)
	if t.used*4 > len(a.s)*3 {
		t.rebuild()
	}
	return nil, evicted
}

// evict removes and returns the clock's victim, or nil when empty.
func (t *table[K, V]) evict() *node[K, V] {
	a := t.slots.Load()
	for range 2*len(a.s) + 1 {
		t.hand = (t.hand + 1) & int(a.mask)
		n := a.s[t.hand].Load()
		if n == nil || n == t.tomb {
			continue
		}
		if n.ref.Load() {
			n.ref.Store(false)
			continue
		}
		a.s[t.hand].Store(t.tomb)
		t.live.Add(-1)
		return n
	}
	return nil
}

// remove deletes k's node, which it returns, if it is n (any node when n
// is nil). Writers only.
func (t *table[K, V]) remove(k K, n *node[K, V]) *node[K, V] {
	a := t.slots.Load()
	i, cur := t.find(a, k)
	if cur == nil || n != nil && cur != n {
		return nil
	}
	a.s[i].Store(t.tomb)
	t.live.Add(-1)
	return cur
}

// rebuild publishes a new array without tombstones, twice as large while
// the live nodes would fill more than half of it and it is below twice
// the size: an array is between 3/8 and 3/4 full as it grows. Writers
// only.
func (t *table[K, V]) rebuild() {
	a := t.slots.Load()
	n := len(a.s)
	for int(t.live.Load())*2 > n && n < 2*t.size {
		n *= 2
	}
	b := newSlots[K, V](n)
	for i := range a.s {
		nd := a.s[i].Load()
		if nd == nil || nd == t.tomb {
			continue
		}
		for j := t.hash(nd.key) & b.mask; ; j = (j + 1) & b.mask {
			if b.s[j].Load() == nil {
				b.s[j].Store(nd)
				break
			}
		}
	}
	t.used = int(t.live.Load())
	t.hand = 0
	t.slots.Store(b)
}

// clear drops every node. Writers only.
func (t *table[K, V]) clear() {
	t.slots.Store(newSlots[K, V](minSlots))
	t.live.Store(0)
	t.used, t.hand = 0, 0
}

// each calls fn on every live node. Writers only.
func (t *table[K, V]) each(fn func(*node[K, V])) {
	a := t.slots.Load()
	for i := range a.s {
		if n := a.s[i].Load(); n != nil && n != t.tomb {
			fn(n)
		}
	}
}

var hashSeed = maphash.MakeSeed()

func hashKey(k Key) uint64 {
	h := maphash.String(hashSeed, k.LimitID)
	h ^= maphash.String(hashSeed, k.Subject) * 0x9e3779b97f4a7c15
	h ^= uint64(k.Start) * 0xbf58476d1ce4e5b9
	return h ^ h>>29
}
