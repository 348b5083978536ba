package sqlite_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// With the store unwritable and the queue full, Close(ctx) returns once
// its ctx ends, reporting what it could not write, and Records blocked on
// the full queue return ErrClosed.
func TestCloseHonoursCtxWithQueueFull(t *testing.T) {
	ctx := context.Background()
	_, tr := stuckWriter(t, func(c *budget.Config) { c.QueueSize = 1; c.BatchSize = 1 })
	u := budget.Usage{Key: "k", Provider: "p", Model: "m", Input: 1}
	if err := tr.Record(ctx, u); err != nil { // fills the queue
		t.Fatal(err)
	}
	blocked := make(chan error, 2)
	for range 2 {
		go func() { blocked <- tr.Record(ctx, u) }()
	}
	done := make(chan error, 1)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		done <- tr.Close(cctx)
	}()
	if err := within(t, 10*time.Second, done, "Close(ctx with a 1s timeout)"); err == nil {
		t.Error("Close with two events unwritable = nil; want an error counting them")
	}
	for range 2 {
		if err := within(t, 10*time.Second, blocked, "Record blocked on the full queue"); !errors.Is(err, budget.ErrClosed) {
			t.Errorf("Record blocked on the full queue during Close = %v; want ErrClosed", err)
		}
	}
	if err := tr.Record(ctx, u); !errors.Is(err, budget.ErrClosed) {
		t.Errorf("Record after Close = %v; want ErrClosed", err)
	}
}
