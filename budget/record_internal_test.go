package budget

import (
	"testing"
	"unsafe"
)

// Up to QueueSize Record operations are live while the writer is behind:
// each is its op, its contributions and its request id, so a field that
// pushed the op past 320 bytes (the next size class is 352) or a
// contribution past 16 would cost every queued event.
func TestQueuedRecordStaysSmall(t *testing.T) {
	if n := unsafe.Sizeof(op{}); n > 320 {
		t.Errorf("an op is %d bytes; want at most 320 (its size class; the next is 352)", n)
	}
	if n := unsafe.Sizeof(contrib{}); n > 16 {
		t.Errorf("a contribution is %d bytes; want at most 16 (a counter and a delta)", n)
	}
}
