package budget_test

import (
	"context"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/budget/internal/memstore"
)

// A deliverer asks every second; with nothing due its claim is a read:
// a write transaction, even an empty one, would make the writer re-read
// what it holds. With a row due it claims.
func TestClaimUsageWritesNothingWhenNothingIsDue(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	s := memstore.New()
	tr := storeTracker(t, s, func(c *budget.Config) { c.Now = func() time.Time { return now } })
	if _, err := tr.AddUsageHook(ctx, "ledger"); err != nil {
		t.Fatal(err)
	}
	g := s.Gate() // the next write transaction waits here
	done := make(chan error, 1)
	go func() {
		items, err := tr.ClaimUsage(ctx, "ledger", "A", time.Minute, 10)
		if err == nil && len(items) != 0 {
			t.Errorf("ClaimUsage on an empty outbox = %v; want nothing", items)
		}
		done <- err
	}()
	select {
	case <-g.Reached():
		g.Release()
		t.Fatalf("ClaimUsage with nothing due opened a write transaction (%v)", <-done)
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	}
	g.Release()
	if _, err := tr.RecordSync(ctx, budget.Usage{Key: "k", RequestID: "r1", Input: 1, At: now}); err != nil {
		t.Fatal(err)
	}
	if items, err := tr.ClaimUsage(ctx, "ledger", "A", time.Minute, 10); err != nil || len(items) != 1 || items[0].Event.RequestID != "r1" {
		t.Fatalf("ClaimUsage with r1 due = %v, %v; want r1", items, err)
	}
}
