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
// Eviction is CLOCK: a slot's ref bit is set when its node is used (once
// per sweep, so a hot entry is not written on every read) and the hand
// passes over set bits, clearing them, to the first node not used since it
// last passed. The bits are the array's, one per slot, not the nodes': a
// node is its key and value alone (a Counter's is 80 bytes, not 96).
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
	refs []atomic.Uint32 // bit i%32 of refs[i/32]: slot i's node used since the clock hand last passed
	mask uint64
}

type node[K comparable, V any] struct {
	key K
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
	return &slotArray[K, V]{s: make([]atomic.Pointer[node[K, V]], n), refs: make([]atomic.Uint32, (n+31)/32), mask: uint64(n - 1)}
}

// get returns k's node or nil, without a lock.
func (t *table[K, V]) get(k K) *node[K, V] {
	_, n := t.find(t.slots.Load(), k)
	return n
}

// use returns k's node or nil, without a lock, marking it used.
func (t *table[K, V]) use(k K) *node[K, V] {
	a := t.slots.Load()
	i, n := t.find(a, k)
	if n != nil {
		a.touch(i)
	}
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

// touch marks slot i used, writing its line only when the mark is not
// set yet.
func (a *slotArray[K, V]) touch(i uint64) {
	w, bit := &a.refs[i/32], uint32(1)<<(i%32)
	if w.Load()&bit == 0 {
		w.Or(bit)
	}
}

// used reports slot i's mark.
func (a *slotArray[K, V]) used(i uint64) bool { return a.refs[i/32].Load()&(1<<(i%32)) != 0 }

// unuse clears slot i's mark. Writers only.
func (a *slotArray[K, V]) unuse(i uint64) { a.refs[i/32].And(^(uint32(1) << (i % 32))) }

// put stores n under n.key, replacing the node there (returned as old),
// else inserting and, when the table holds size nodes already, evicting
// first (returned as evicted). Writers only.
//
// The victim is sought on n's own probe path first: the first node there
// not used since the clock's hand last passed it, whose slot n then takes
// (only the hand clears marks, so a node used since is never taken). Evicting only at the clock's hand
// would tombstone the slots behind it while every insertion ahead of it
// fills a nil slot, until the run of full slots ahead is tens of
// thousands long and every miss walks it (a 200,000-counter cache, at
// 3 counters a key, took milliseconds a cold key). Only a path with no
// such node within localEvict nodes falls back to the hand.
func (t *table[K, V]) put(n *node[K, V]) (old, evicted *node[K, V]) {
	a := t.slots.Load()
	full := int(t.live.Load()) >= t.size
	free, victim, seen := -1, -1, 0
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
		if full && victim < 0 && seen < localEvict {
			seen++
			if !a.used(i) {
				victim = int(i)
			}
		}
	}
	if victim >= 0 {
		evicted = a.s[victim].Load()
		a.s[victim].Store(n) // n is unmarked, as the victim's slot was
		return nil, evicted
	}
	if full {
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

// localEvict is how many nodes of its probe path an insertion into a full
// table considers before it falls back to the clock's hand.
const localEvict = 8

// evict removes and returns the clock's victim, or nil when empty.
func (t *table[K, V]) evict() *node[K, V] {
	a := t.slots.Load()
	for range 2*len(a.s) + 1 {
		t.hand = (t.hand + 1) & int(a.mask)
		n := a.s[t.hand].Load()
		if n == nil || n == t.tomb {
			continue
		}
		if i := uint64(t.hand); a.used(i) {
			a.unuse(i)
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
				if a.used(uint64(i)) { // its mark moves with it
					b.touch(j)
				}
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
