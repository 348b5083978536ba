package store_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// flaky fails every write while fail is set.
type flaky struct {
	budget.Store
	fail     atomic.Bool
	mu       sync.Mutex
	succeded chan struct{} // closed at the next successful write
}

func (f *flaky) Update(ctx context.Context, fn func(budget.Tx) error) error {
	if f.fail.Load() {
		return errors.New("disk I/O error (injected)")
	}
	err := f.Store.Update(ctx, fn)
	if err == nil {
		f.mu.Lock()
		if f.succeded != nil {
			close(f.succeded)
			f.succeded = nil
		}
		f.mu.Unlock()
	}
	return err
}

// heal stops the failures and returns a wait for the next successful write.
func (f *flaky) heal() func(context.Context) error {
	f.mu.Lock()
	if f.succeded == nil {
		f.succeded = make(chan struct{})
	}
	ch := f.succeded
	f.mu.Unlock()
	f.fail.Store(false)
	return func(ctx context.Context) error { return waitClosed(ctx, ch) }
}

func waitClosed(ctx context.Context, ch <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return errors.New("no write succeeded within 30s")
	}
}

// Flush queued behind a batch that keeps failing must still return the
// error once the database stays unwritable.
func TestFlushBehindFailingBatch(t *testing.T) {
	ctx := context.Background()
	f := &flaky{Store: openStore(t, tmpDB(t))}
	tr := newTracker(t, f, nil)
	f.fail.Store(true)
	if err := tr.Record(ctx, budget.Usage{Key: "k", Provider: "p", Model: "m", Input: 1}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // the writer is now retrying that batch
	res := make(chan error, 1)
	go func() { _, err := tr.Flush(ctx); res <- err }()
	select {
	case err := <-res:
		t.Logf("Flush returned %v", err)
	case <-time.After(20 * time.Second):
		t.Errorf("Flush(context.Background()) still blocked after 20s with the store failing every attempt; stats %+v", tr.Stats())
	}
	f.fail.Store(false)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := tr.Close(cctx); err != nil {
		t.Error(err)
	}
}

// Close with a short deadline on an unwritable store: a concurrent
// Flush(context.Background()) must not hang forever.
func TestFlushDuringCloseGiveUp(t *testing.T) {
	ctx := context.Background()
	f := &flaky{Store: openStore(t, tmpDB(t))}
	tr := newTracker(t, f, nil)
	f.fail.Store(true)
	tr.Record(ctx, budget.Usage{Key: "k", Provider: "p", Model: "m", Input: 1})
	res := make(chan error, 1)
	go func() { _, err := tr.Flush(ctx); res <- err }()
	time.Sleep(5 * time.Millisecond)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	t.Logf("Close: %v", tr.Close(cctx))
	select {
	case err := <-res:
		t.Logf("Flush returned %v", err)
	case <-time.After(5 * time.Second):
		t.Errorf("Flush(context.Background()) never answered after Close gave up")
	}
	// And a reservation whose batch was given up on:
}
