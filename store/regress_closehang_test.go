package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// With the store unwritable and the queue full, a Record blocked with
// context.Background holds closeMu.RLock; Close(ctx) then ignores its ctx.
func TestCloseIgnoresCtxWhenQueueFull(t *testing.T) {
	ctx := context.Background()
	f := &flaky{Store: openStore(t, tmpDB(t))}
	tr := newTracker(t, f, func(c *budget.Config) { c.QueueSize = 1; c.BatchSize = 1 })
	f.fail.Store(true)
	for i := 0; i < 3; i++ {
		go tr.Record(ctx, budget.Usage{Key: "k", Provider: "p", Model: "m", Input: 1})
	}
	time.Sleep(100 * time.Millisecond)
	done := make(chan error, 1)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		done <- tr.Close(cctx)
	}()
	select {
	case err := <-done:
		t.Logf("Close returned %v", err)
	case <-time.After(10 * time.Second):
		t.Errorf("Close(ctx with 1s timeout) still blocked after 10s")
		// A Record with its own short ctx now blocks too (RLock behind the pending Lock).
		rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		r := make(chan error, 1)
		go func() { r <- tr.Record(rctx, budget.Usage{Key: "k", Provider: "p", Model: "m", Input: 1}) }()
		select {
		case err := <-r:
			t.Logf("Record(ctx 100ms) = %v", err)
		case <-time.After(3 * time.Second):
			t.Errorf("Record with a 100ms ctx still blocked after 3s (stuck on closeMu.RLock)")
		}
		f.fail.Store(false) // let the test end
	}
}
