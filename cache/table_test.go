package cache

import (
	"strconv"
	"sync"
	"testing"
	"unsafe"
)

// A gateway caches a node per limit window of each key: a field that
// pushed the node past 80 bytes would cost 16 bytes a counter (the
// allocator's next class is 96), as the writer's row mark once did
// unnoticed. It was 96 until the mutex moved out (counterLocks) and the
// small fields were packed into one word (Counter.state): 48 bytes a key
// with 3 limits.
func TestCounterNodeIs80Bytes(t *testing.T) {
	if n := unsafe.Sizeof(node[Key, Counter]{}); n > 80 {
		t.Errorf("a counter's node is %d bytes; want at most 80 (the 80-byte size class; the next is 96)", n)
	}
}

// The fields packed into a counter's state word change independently:
// the writer's row mark survives commits beginning and ending around it,
// the commit sequence moves on regardless of marks, and eviction's dead
// bit touches neither; marks, commits and holds changes racing on
// several goroutines lose nothing.
func TestCounterStateFieldsAreIndependent(t *testing.T) {
	var c Counter
	c.BeginCommit()
	c.MarkRow(7)
	c.BeginCommit()
	if s := c.Seq(); s != 1 || c.inflight() != 2 || !c.Row(7) || c.Row(8) || c.Row(0) {
		t.Fatalf("after 2 begins and a mark: seq %d, inflight %d, row(7) %v, row(8) %v, row(0) %v; want 1, 2, true, false, false",
			s, c.inflight(), c.Row(7), c.Row(8), c.Row(0))
	}
	c.EndCommit(0, 0, true)
	c.EndCommit(0, 0, true)
	if s := c.Seq(); s != 2 || c.inflight() != 0 || !c.Row(7) || c.Dead() {
		t.Fatalf("after both ends: seq %d, inflight %d, row(7) %v, dead %v; want 2, 0, true, false", s, c.inflight(), c.Row(7), c.Dead())
	}
	// Only the epoch's low 24 bits are kept, and an epoch whose low bits
	// are all 0 marks nothing.
	c.MarkRow(1 << 24)
	if c.Row(1<<24) || c.Row(7) {
		t.Fatalf("after marking epoch 2^24: row(2^24) %v, row(7) %v; want false, false", c.Row(1<<24), c.Row(7))
	}
	c.MarkRow(1<<24 + 5)
	if !c.Row(5) || !c.Row(1<<24+5) {
		t.Fatal("epoch 2^24+5 is not taken for 5, its low 24 bits")
	}
	c.state.Or(deadBit)
	if !c.Dead() || !c.Row(5) || c.Seq() != 2 {
		t.Fatalf("dead: dead %v, row(5) %v, seq %d; want true, true, 2", c.Dead(), c.Row(5), c.Seq())
	}

	// Racing: two goroutines mark rows, one commits, one changes holds.
	// Only one commits, so its commits never overlap and each moves seq by
	// exactly 2 (concurrent commits move it only when the in-flight count
	// leaves and returns to 0), as each holds change does: the expected
	// seq is exact, and a field whose bits overlapped another's would
	// lose or corrupt some of it.
	const n = 1000
	var d Counter
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			for i := range n {
				d.MarkRow(uint32(g*n + i + 1))
			}
		})
	}
	wg.Go(func() {
		for range n {
			d.BeginCommit()
			d.EndCommit(0, 0, true)
		}
	})
	wg.Go(func() {
		for range n {
			d.UpdateHolds(func(h []Hold) []Hold { return h })
		}
	})
	wg.Wait()
	if s := d.Seq(); s != 2*n+2*n || d.inflight() != 0 || d.Dead() || !(d.Row(n) || d.Row(2*n)) {
		t.Fatalf("after racing: seq %d, inflight %d, dead %v, last marks %v %v; want seq %d, 0 in flight, not dead, one of the last marks",
			s, d.inflight(), d.Dead(), d.Row(n), d.Row(2*n), 4*n)
	}
}

// More commits in flight on one counter than its state word counts (none
// can be: only the tracker's writer commits, one or two at a time) spill
// into a side count instead of panicking the process, and seq stays odd
// until the last of them ends, so no refresh read during them installs.
func TestCommitsInFlightPastTheFieldSpill(t *testing.T) {
	var c Counter
	c.AddPending(5)
	const n = inflightMax + 73
	for range n {
		c.BeginCommit()
	}
	seq := c.Seq()
	if seq != 1 || c.inflight() != inflightMax {
		t.Fatalf("after %d begins: seq %d, inflight %d; want 1, %d", n, seq, c.inflight(), inflightMax)
	}
	for i := range n - 1 {
		c.EndCommit(0, 0, true)
		// Refresh(0, ...) is a store read taken before the commits began.
		if s := c.Seq(); s != seq || c.Refresh(0, 100, nil, 1) {
			t.Fatalf("after %d of %d ends: seq %d (want %d), or a read from before the commits installed", i+1, n, s, seq)
		}
	}
	c.EndCommit(5, 5, true)
	spilled.Lock()
	_, left := spilled.n[&c]
	spilled.Unlock()
	if s := c.Seq(); s != 2 || c.inflight() != 0 || left || c.Pending() != 0 {
		t.Fatalf("after every end: seq %d, inflight %d, spilled entry left %v, pending %d; want 2, 0, false, 0", s, c.inflight(), left, c.Pending())
	}
	if !c.Refresh(2, 100, nil, 1) || c.Used() != 100 {
		t.Fatalf("a refresh after the commits did not install: used %d", c.Used())
	}
}

// The cache holds at most its size however many keys pass through it,
// and so does its slot array: memory follows the size, not the keys seen.
func TestCountersBoundedByTheirSize(t *testing.T) {
	cs := NewCounters(100)
	for i := range 100_000 {
		cs.Acquire(Key{LimitID: "l", Subject: strconv.Itoa(i), Start: int64(i)})
		if n := cs.Len(); n > 100 {
			t.Fatalf("after %d keys the cache holds %d counters; want at most 100", i+1, n)
		}
	}
	if n := len(cs.t.slots.Load().s); n > 256 {
		t.Fatalf("slot array of %d after 100,000 keys through a 100-counter cache; want at most 256", n)
	}
	d := NewDefs[string, int](100)
	for i := range 100_000 {
		d.Put(strconv.Itoa(i), i, 1)
	}
	if n, s := d.Len(), len(d.t.slots.Load().s); n != 100 || s > 256 {
		t.Fatalf("defs after 100,000 keys: %d entries, %d slots; want 100 and at most 256", n, s)
	}
}

// A counter acquired between every insertion outlives the others: the
// clock passes over what was used since it last came by.
func TestCountersKeepWhatIsUsed(t *testing.T) {
	cs := NewCounters(50)
	hot := Key{LimitID: "hot"}
	c := cs.Acquire(hot)
	for i := range 10_000 {
		cs.Acquire(Key{LimitID: "cold", Start: int64(i)})
		if got := cs.Acquire(hot); got != c || got.Dead() {
			t.Fatalf("after %d cold keys the hot counter was evicted", i+1)
		}
	}
	// An entry Peek finds is marked used as well.
	d := NewDefs[string, int](50)
	d.Put("hot", 1, 1)
	for i := range 10_000 {
		d.Put(strconv.Itoa(i), i, 1)
		if e, ok := d.Peek("hot"); !ok || e.Value != 1 {
			t.Fatalf("after %d puts the hot definition was evicted", i+1)
		}
	}
}

// Readers take no lock while writers insert, replace, remove and evict:
// each reader finds either nothing or the value stored under its key,
// never another key's.
func TestDefsReadWhileWritten(t *testing.T) {
	d := NewDefs[string, int](64)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20_000 {
				k := strconv.Itoa(i % 500)
				d.Put(k, i%500, int64(w))
				if i%7 == 0 {
					d.Remove(strconv.Itoa((i + 3) % 500))
				}
			}
		}()
	}
	errs := make(chan string, 4)
	for range 4 {
		go func() {
			for {
				select {
				case <-stop:
					errs <- ""
					return
				default:
				}
				for i := range 500 {
					if e, ok := d.Peek(strconv.Itoa(i)); ok && e.Value != i {
						errs <- "key " + strconv.Itoa(i) + " read as " + strconv.Itoa(e.Value)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	for range 4 {
		if msg := <-errs; msg != "" {
			t.Fatal(msg)
		}
	}
}

// Gen moves on with every change and never with a read.
func TestDefsGen(t *testing.T) {
	d := NewDefs[string, int](4)
	g := d.Gen()
	d.Peek("a")
	if d.Gen() != g {
		t.Fatal("Peek moved Gen")
	}
	for _, change := range []func(){func() { d.Put("a", 1, 1) }, func() { d.Remove("a") }, d.Purge} {
		change()
		if d.Gen() == g {
			t.Fatal("a change left Gen where it was")
		}
		g = d.Gen()
	}
}

// A full cache's runs of occupied slots stay short however many keys
// pass through it, so a miss (every cold key's lookup) probes a few
// slots. Evicting only at the clock's hand once let the slots ahead of it
// fill up into a run of tens of thousands.
func TestFullCacheProbesStayShort(t *testing.T) {
	cs := NewCounters(200_000)
	for i := range 600_000 {
		cs.Acquire(Key{LimitID: "lim-" + strconv.Itoa(i), Start: int64(i % 3)})
	}
	a := cs.t.slots.Load()
	run, longest := 0, 0
	for i := range 2 * len(a.s) { // twice round: a run may wrap
		if a.s[i%len(a.s)].Load() == nil {
			run = 0
			continue
		}
		run++
		longest = max(longest, run)
	}
	if longest > 1000 {
		t.Fatalf("after 600,000 keys through a 200,000-counter cache the longest run of occupied slots is %d; want at most 1,000", longest)
	}
}
