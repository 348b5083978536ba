package budget_test

import (
	"context"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// A key's limit slot keeps the counter of the window its last check
// found, so the next check in that window takes it from there, not from
// a second lookup in the counter cache; a check in a later window moves
// the slot on to that window's counter.
func TestSlotKeepsItsWindowsCounter(t *testing.T) {
	tr := checkTracker(t)
	ctx := context.Background()
	req := budget.Request{Key: "k", Provider: "openai", Model: "gpt-4o"}
	now := time.Now()
	buf := make([]budget.Status, 0, 8)
	if _, err := tr.CheckInto(ctx, req, now, buf); err != nil {
		t.Fatal(err)
	}
	slot, cached := budget.SlotCounter(tr, "k", "model")
	if slot == nil || slot != cached {
		t.Fatalf("after a check the slot holds counter %p, the cache %p; want the cache's", slot, cached)
	}
	if _, err := tr.CheckInto(ctx, req, now.Add(time.Millisecond), buf); err != nil {
		t.Fatal(err)
	}
	if again, _ := budget.SlotCounter(tr, "k", "model"); again != slot {
		t.Fatalf("a second check in the window left counter %p in the slot; want %p", again, slot)
	}
	// The model limit's window is a minute: two minutes on is another.
	if _, err := tr.CheckInto(ctx, req, now.Add(2*time.Minute), buf); err != nil {
		t.Fatal(err)
	}
	next, cached := budget.SlotCounter(tr, "k", "model")
	if next == nil || next == slot || next != cached || next.Start() <= slot.Start() {
		t.Fatalf("after a check in a later window the slot holds %p, the cache %p; want the later window's, not %p", next, cached, slot)
	}
}
