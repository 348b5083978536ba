package cache

import (
	"strconv"
	"sync"
	"testing"
	"unsafe"
)

// A gateway caches a node per limit window of each key: a field that
// pushed the node past 96 bytes would cost 16 bytes a counter (the
// allocator's next class is 112), as the writer's row mark once did
// unnoticed.
func TestCounterNodeIs96Bytes(t *testing.T) {
	if n := unsafe.Sizeof(node[Key, Counter]{}); n > 96 {
		t.Errorf("a counter's node is %d bytes; want at most 96 (the 96-byte size class; the next is 112)", n)
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
