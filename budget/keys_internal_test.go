package budget

import (
	"testing"
	"time"
	"unsafe"
)

// A gateway caches a key's entry and a slot per limit for every key it
// serves: a field that pushed either past its size class would cost every
// key. The entry was 64 bytes until its limits version, team,
// organisation and routes moved into a keyMeta shared by the keys with
// the same; the slot held a 24-byte window object besides, allocated
// twice on a key's first check, until the window's bounds moved into the
// shared definition (limDef.windowAt).
func TestKeyEntryAndSlotSizes(t *testing.T) {
	if n := unsafe.Sizeof(keyLimits{}); n > 48 {
		t.Errorf("a key's entry is %d bytes; want at most 48 (the next size class is 64)", n)
	}
	if n := unsafe.Sizeof(limSlot{}); n > 32 {
		t.Errorf("a limit's slot is %d bytes; want at most 32 (3 slots are the 96-byte class)", n)
	}
}

// Usage for requests that began before a boundary arrives after it with
// instants in the old window, and a check may ask about any instant, past
// or future: the definition's window memo, shared by every key with the
// definition, must stay on the window holding the clock, or every current
// check on any of those keys redoes the calendar arithmetic and allocates
// until something moves it back.
func TestWindowMemoStaysOnTheClocksWindow(t *testing.T) {
	d := &limDef{proto: Limit{Window: Window{Kind: Daily}}}
	now := time.Date(2026, 12, 7, 0, 0, 1, 0, time.UTC)
	clock := now.UnixNano()
	cur := d.windowAt(now, clock)
	memo := d.win.Load()
	if memo == nil || *memo != cur || !cur.has(clock) {
		t.Fatalf("after a check at %v the memo is %v; want %v holding it", now, memo, cur)
	}
	past := now.Add(-2 * time.Second) // before midnight
	if w, want := d.windowAt(past, clock), (span{start: nsOf(now.Add(-24*time.Hour - time.Second)), end: cur.start}); w != want {
		t.Fatalf("window at %v = %v; want %v", past, w, want)
	}
	future := now.Add(48 * time.Hour)
	if w := d.windowAt(future, clock); !w.has(future.UnixNano()) {
		t.Fatalf("window at %v = %v; want one holding it", future, w)
	}
	d.windowAt(past, 0) // Record's, without the clock
	d.windowAt(future, 0)
	if d.win.Load() != memo {
		t.Fatalf("a window at an instant other than the clock's replaced the memo: %v, want %v", d.win.Load(), memo)
	}
	if n := testing.AllocsPerRun(100, func() {
		d.windowAt(past, clock)
		d.windowAt(future, clock)
		if d.windowAt(now, clock) != cur {
			t.Fatal("the current window changed")
		}
	}); n != 0 {
		t.Errorf("a past, a future and the current window allocate %v times; want 0", n)
	}
	// The clock's next window replaces the memo.
	next := now.Add(24 * time.Hour)
	if w := d.windowAt(next, next.UnixNano()); d.win.Load() == memo || *d.win.Load() != w || !w.has(next.UnixNano()) {
		t.Fatalf("after a check at %v the memo is %v; want its window %v", next, d.win.Load(), w)
	}
}
