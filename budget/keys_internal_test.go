package budget

import (
	"testing"
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
