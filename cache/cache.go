// Package cache holds the in-memory side of tokenbudget: committed counter
// totals with the deltas this process has queued but not yet written, and
// definitions, each in a bounded table of its own (table.go). It imports
// nothing of tokenbudget's own.
//
// Concurrency: every type here is safe for concurrent use. Reads (Peek, the
// Counter getters) take no exclusive lock, so checks on many goroutines do
// not serialise; recency is left to the writers (Acquire). A Counter that
// holds pending deltas or an in-flight commit is never dropped by eviction:
// it is pinned aside until its deltas are settled.
package cache

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// Key names one limit's window: the limit id and the window start in Unix
// nanoseconds (0 for windowless concurrent limits).
type Key struct {
	LimitID string
	Subject string // the key a default limit counts for; "" otherwise
	Start   int64
}

// Hold is a live reservation's hold on a counter.
type Hold struct {
	ID        string
	Amount    int64
	ExpiresAt int64 // Unix nanoseconds
}

// Counter is one limit window as this process sees it: what the store had
// when last read or written, plus what this process has queued since.
//
// It is 40 bytes, so that a node (key and Counter) is 80, a size class of
// its own, not 96: a gateway caches a few per key. Its mutex is therefore
// one of a fixed set shared by address (lock), and its small fields share
// one word (state).
type Counter struct {
	// used is the committed total plus pending, changed as one under the
	// lock, so a reader loads one word and sees a commit's delta in
	// exactly one of them.
	used     atomic.Int64
	pending  atomic.Int64
	loadedAt atomic.Int64 // Unix nanos of the last store read; 0 = never read
	holds    atomic.Pointer[[]Hold]
	// state is, from the top bit down:
	//   - seq (32 bits): the commit sequence, odd while a commit is in
	//     flight. It is only compared for equality across one store read,
	//     which 2^31 commits to one window would have to span to mistake a
	//     wrapped seq for the one it took.
	//   - row (24 bits): the writer's mark that the window's row exists in
	//     the store, as the low 24 bits of its memory epoch (see Row).
	//   - inflight (7 bits): commits in progress that touch the counter (a
	//     writer has one or two; past 127 they spill, see spilled);
	//     changed under the lock.
	//   - dead (1 bit): dropped from the cache and not pinned, no longer
	//     the live object; set under the lock, read without it.
	state atomic.Uint64
}

const (
	deadBit     = 1
	inflightOne = 1 << 1
	inflightMax = 1<<7 - 1
	rowShift    = 8
	rowMask     = 1<<24 - 1
	seqOne      = 1 << 32
)

// counterLocks are the Counters' mutexes, a counter's picked by its
// address: a counter's critical sections are a few loads and stores, and
// none takes another counter's lock, so sharing one is safe and rarely
// contended. Each sits on a cache line of its own.
var counterLocks [1 << 10]struct {
	sync.Mutex
	_ [64 - 8]byte
}

// lock is c's mutex, which orders commits, refreshes, pending changes and
// eviction.
func (c *Counter) lock() *sync.Mutex {
	h := uint64(uintptr(unsafe.Pointer(c))) * 0x9e3779b97f4a7c15
	return &counterLocks[h>>(64-10)].Mutex
}

func (c *Counter) inflight() uint64 { return c.state.Load() >> 1 & inflightMax }

// Key is the key c is cached under. A Counter exists only in its table
// node, beside its key (Acquire makes it there, and Counters hands out no
// other), so whoever keeps a counter finds its key without a copy of it:
// an event queued for the writer keeps its counters as pointers alone (16
// bytes each instead of 56, with up to QueueSize events queued).
func (c *Counter) Key() Key { return c.node().key }

// node is the table node c sits in.
func (c *Counter) node() *node[Key, Counter] {
	return (*node[Key, Counter])(unsafe.Add(unsafe.Pointer(c), -counterOffset))
}

// Start is the window start of c's key (Key().Start), read without
// copying the key.
func (c *Counter) Start() int64 { return c.node().key.Start }

// counterOffset is where a Counter sits in its node.
var counterOffset = int(unsafe.Offsetof(node[Key, Counter]{}.val))

// Used is the committed total plus what this process has queued since.
func (c *Counter) Used() int64 { return c.used.Load() }

// Committed is the last total known to be in the store.
func (c *Counter) Committed() int64 {
	mu := c.lock()
	mu.Lock()
	defer mu.Unlock()
	return c.used.Load() - c.pending.Load()
}

// Pending is what this process has queued for the window but not committed.
func (c *Counter) Pending() int64 { return c.pending.Load() }

// LoadedAt is when the counter was last read from the store (Unix nanos);
// 0 means never, so Committed means nothing yet.
func (c *Counter) LoadedAt() int64 { return c.loadedAt.Load() }

// Reserved sums the holds that are still live at now (Unix nanos), and
// reports the earliest of their expiries (0 when none).
func (c *Counter) Reserved(now int64) (sum, count, next int64) {
	p := c.holds.Load()
	if p == nil {
		return 0, 0, 0
	}
	for _, h := range *p {
		if h.ExpiresAt > now {
			sum += h.Amount
			count++
			if next == 0 || h.ExpiresAt < next {
				next = h.ExpiresAt
			}
		}
	}
	return sum, count, next
}

// Seq is the counter's commit sequence, taken before a store read and
// handed back to Refresh. It is odd while a local commit is in flight.
func (c *Counter) Seq() uint64 { return c.state.Load() / seqOne }

// Refresh installs what was read from the store at loadedAt, unless a local
// commit began or ended since seq was taken: then the read may or may not
// include that commit, and installing it could count the commit's delta
// twice (once in the read, once in pending). It reports whether it installed.
func (c *Counter) Refresh(seq uint64, committed int64, holds []Hold, loadedAt int64) bool {
	if seq%2 == 1 {
		return false
	}
	mu := c.lock()
	mu.Lock()
	defer mu.Unlock()
	if c.Seq() != seq {
		return false
	}
	c.used.Store(committed + c.pending.Load())
	if len(holds) == 0 {
		c.holds.Store(nil)
	} else {
		c.holds.Store(&holds)
	}
	c.loadedAt.Store(loadedAt)
	return true
}

// AddPending adds a queued delta. It returns false when the counter was
// evicted before the delta landed: the caller must Acquire the live one.
func (c *Counter) AddPending(delta int64) bool {
	mu := c.lock()
	mu.Lock()
	defer mu.Unlock()
	if c.Dead() {
		return false
	}
	c.pending.Add(delta)
	c.used.Add(delta)
	return true
}

// BeginCommit marks a store commit touching this counter as in flight. Call
// it once per counter per commit: seq is odd from the first BeginCommit to
// the last EndCommit.
func (c *Counter) BeginCommit() {
	mu := c.lock()
	mu.Lock()
	switch n := c.inflight(); {
	case n == 0:
		c.state.Add(seqOne + inflightOne)
	case n < inflightMax:
		c.state.Add(inflightOne)
	default:
		spill(c, 1)
	}
	mu.Unlock()
}

// EndCommit settles a commit: pending loses what was queued for it, and,
// when the commit succeeded, committed gains what the store added. seq
// moves on so no refresh read during the commit is installed.
func (c *Counter) EndCommit(queued, applied int64, ok bool) {
	mu := c.lock()
	mu.Lock()
	if c.inflight() < inflightMax || !spill(c, -1) {
		c.state.Add(^uint64(inflightOne - 1)) // less one
	}
	if ok {
		c.pending.Add(-queued)
		if c.loadedAt.Load() == 0 {
			applied = 0 // no committed total to add to yet
		}
		c.used.Add(applied - queued)
	}
	if c.inflight() == 0 {
		c.state.Add(seqOne)
	}
	mu.Unlock()
}

// spilled counts the commits in flight on a counter past the inflightMax
// its state word holds. None can be: only the tracker's one writer
// goroutine commits, and it has at most two commits in flight on a
// counter. The map is there so that a broken invariant costs a lock and
// a map entry, not the process (a panic) or a refresh that counts an
// in-flight delta twice (a count that wrapped to 0 and made seq even).
var spilled struct {
	sync.Mutex
	n map[*Counter]int
}

// spill adds d to c's spilled commits, under c's lock, and reports
// whether it did: never taking it below 0.
func spill(c *Counter, d int) bool {
	spilled.Lock()
	defer spilled.Unlock()
	n := spilled.n[c] + d
	switch {
	case n < 0:
		return false
	case n == 0:
		delete(spilled.n, c)
	default:
		if spilled.n == nil {
			spilled.n = make(map[*Counter]int)
		}
		spilled.n[c] = n
	}
	return true
}

// UpdateHolds replaces the holds through fn under the counter's lock, for a
// local reservation, commit or release.
//
// fn runs under the counter's lock: it must not call another counter.
func (c *Counter) UpdateHolds(fn func([]Hold) []Hold) {
	mu := c.lock()
	mu.Lock()
	defer mu.Unlock()
	var cur []Hold
	if p := c.holds.Load(); p != nil {
		cur = *p
	}
	next := fn(append([]Hold(nil), cur...))
	c.holds.Store(&next)
	c.state.Add(2 * seqOne) // a refresh read before this change must not overwrite it
}

// Row reports whether the writer marked, in its memory epoch epoch, that
// the window's row exists in the store. It lets the writer keep that for
// as many windows as the cache holds, at no cost beyond the counter's.
// Only the epoch's low 24 bits are kept, so a mark 2^24 epochs old is
// taken for a current one. Usually the row it marked still exists, and
// the mark is true. At worst the row is gone: the write's UPDATE then
// hits fewer rows than planned, the store returns ErrConflict, and the
// writer plans the batch again after forget() has moved the epoch on (a
// retry, never a wrong count), as with its other hashed marks. The
// writer's epoch moves once per failed or retried write and once per
// batch after another process wrote, so at 200 such batches a second it
// wraps in about 23 hours.
func (c *Counter) Row(epoch uint32) bool {
	e := uint64(epoch) & rowMask
	return e != 0 && c.state.Load()>>rowShift&rowMask == e
}

// MarkRow records that the window's row exists in the store, as the
// writer knows it in its memory epoch epoch (a new epoch forgets every
// mark).
func (c *Counter) MarkRow(epoch uint32) {
	e := uint64(epoch) & rowMask
	for {
		old := c.state.Load()
		if c.state.CompareAndSwap(old, old&^(rowMask<<rowShift)|e<<rowShift) {
			return
		}
	}
}

func (c *Counter) busy() bool { return c.pending.Load() != 0 || c.inflight() != 0 }

// Counters is a bounded cache of Counters that never loses a busy one.
//
// Each counter lives in its table node (one allocation with its key);
// Peek and Acquire's hit path take no lock. Every insertion, and so every
// eviction, runs under slow: a miss in Acquire therefore cannot slip
// between a busy counter's eviction and its pinning and create a second
// counter for the same key.
type Counters struct {
	t      *table[Key, Counter]
	slow   sync.Mutex // serialises insertions, removals and the miss path of Acquire
	pinned sync.Map   // Key -> *node evicted while busy
}

// NewCounters returns a cache of at most size idle counters (plus those
// pinned by pending deltas).
func NewCounters(size int) *Counters {
	return &Counters{t: newTable[Key, Counter](size, hashKey)}
}

// evict runs under slow: a busy counter is pinned aside, an idle one is
// marked dead so late AddPending calls go to its successor.
func (cs *Counters) evict(n *node[Key, Counter]) {
	c := &n.val
	mu := c.lock()
	mu.Lock()
	defer mu.Unlock()
	if c.busy() {
		cs.pinned.Store(n.key, n)
		return
	}
	c.state.Or(deadBit)
}

// Dead reports whether the counter was evicted: a holder of the pointer
// must look the key up again.
func (c *Counter) Dead() bool { return c.state.Load()&deadBit != 0 }

// Peek returns the cached counter for k without touching recency, or nil.
func (cs *Counters) Peek(k Key) *Counter {
	if n := cs.t.get(k); n != nil {
		return &n.val
	}
	return nil
}

// Acquire returns the live counter for k, creating an unloaded one if
// needed, and marks it recently used.
func (cs *Counters) Acquire(k Key) *Counter {
	if n := cs.t.use(k); n != nil && !n.val.Dead() {
		return &n.val
	}
	cs.slow.Lock()
	defer cs.slow.Unlock()
	if n := cs.t.use(k); n != nil {
		if !n.val.Dead() {
			return &n.val
		}
		cs.t.remove(k, n)
	}
	if p, ok := cs.pinned.Load(k); ok {
		n := p.(*node[Key, Counter])
		c := &n.val
		// Under c.lock(), so Unpin cannot retire c between the check and the
		// move back into the table.
		mu := c.lock()
		mu.Lock()
		if !c.Dead() {
			cs.pinned.CompareAndDelete(k, n)
			mu.Unlock()
			cs.insert(n)
			return c
		}
		mu.Unlock()
	}
	// Unmarked: a counter is kept over others once used again, so a scan
	// of keys used once does not flush the ones in use.
	n := &node[Key, Counter]{key: k}
	cs.insert(n)
	return &n.val
}

// insert adds n, whose key is absent, evicting (and so pinning or
// retiring) the clock's victim when full. Under slow.
func (cs *Counters) insert(n *node[Key, Counter]) {
	if _, ev := cs.t.put(n); ev != nil {
		cs.evict(ev)
	}
}

// Unpin forgets k's counter once it is idle, if eviction had pinned it.
func (cs *Counters) Unpin(k Key, c *Counter) {
	p, ok := cs.pinned.Load(k)
	if !ok || &p.(*node[Key, Counter]).val != c {
		return
	}
	mu := c.lock()
	mu.Lock()
	defer mu.Unlock()
	if !c.busy() && cs.pinned.CompareAndDelete(k, p) {
		c.state.Or(deadBit)
	}
}

// Len is the number of counters in the cache (pinned ones excluded).
func (cs *Counters) Len() int { return int(cs.t.live.Load()) }

// Purge drops every idle counter; busy ones stay pinned.
func (cs *Counters) Purge() {
	cs.slow.Lock()
	defer cs.slow.Unlock()
	cs.t.each(cs.evict)
	cs.t.clear()
}
