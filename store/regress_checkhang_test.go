package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// While writes fail (reads still work), a Check of a window whose first
// event is stuck in the writer spins until its ctx ends.
func TestCheckHangsWhileWriterStuck(t *testing.T) {
	ctx := context.Background()
	f := &flaky{Store: openStore(t, tmpDB(t))}
	tr := newTracker(t, f, nil)
	max := int64(1000)
	if _, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "1h", Max: &max}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tr.Check(ctx, budget.Request{Key: "k"}) // limits cached, this hour's counter loaded
	f.fail.Store(true)
	next := now.Add(time.Hour) // e.g. the clock moved into the next window
	tr.Record(ctx, budget.Usage{Key: "k", Provider: "p", Model: "m", Input: 1, At: next})
	time.Sleep(50 * time.Millisecond)
	res := make(chan error, 1)
	go func() { _, err := tr.CheckAt(ctx, budget.Request{Key: "k"}, next); res <- err }()
	select {
	case err := <-res:
		t.Logf("CheckAt returned %v", err)
	case <-time.After(5 * time.Second):
		t.Errorf("CheckAt(context.Background()) blocked >5s although the store is readable (writer stuck on a failing batch)")
	}
	f.fail.Store(false)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	tr.Close(cctx)
}
