package sqlite_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// A Reserve whose caller gave up while it waited for the writer returns
// the ctx's error and leaves nothing held: the caller has no id to release.
func TestReserveGivenUpLeavesNoHold(t *testing.T) {
	ctx := context.Background()
	g := newGated(openStore(t, tmpDB(t)))
	tr := newTracker(t, g, func(c *budget.Config) { c.Now = fixed })
	max := int64(100)
	l, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "1h", Max: &max})
	if err != nil {
		t.Fatal(err)
	}
	g.close()
	if err := tr.Record(ctx, budget.Usage{Key: "other", Provider: "p", Model: "m", Input: 1}); err != nil {
		t.Fatal(err)
	}
	within(t, 10*time.Second, g.arrived, "the writer's batch") // the writer is busy
	cctx, cancel := context.WithCancel(ctx)
	res := make(chan error, 1)
	go func() {
		_, err := tr.Reserve(cctx, budget.Request{Key: "k", Estimate: budget.Estimate{Tokens: 80}}, time.Hour)
		res <- err
	}()
	waitQueued(t, tr, 1) // the reservation waits behind the batch
	cancel()
	if err := within(t, 10*time.Second, res, "Reserve after its ctx ended"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Reserve whose caller gave up = %v; want context.Canceled", err)
	}
	g.open()
	if _, err := tr.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := tr.Check(ctx, budget.Request{Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Limits) != 1 || d.Limits[0].Limit.ID != l.ID || d.Limits[0].Reserved != 0 {
		t.Fatalf("after the caller gave up: %+v; want %s with nothing reserved (held for the whole TTL, with no id to release)", d.Limits, l.ID)
	}
}

// waitQueued waits until n operations wait in tr's queue.
func waitQueued(t *testing.T, tr *budget.Tracker, n int64) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for tr.Stats().QueueDepth < n {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("queue depth %d after 10s; want %d", tr.Stats().QueueDepth, n)
		}
	}
}
