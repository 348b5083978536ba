package sqlite_test

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Flush queued behind a batch that keeps failing returns the error once
// the batch failed FlushFailures times, though the writer keeps the batch
// and writes it once the store recovers.
func TestFlushReportsErrorWhileWritesFail(t *testing.T) {
	ctx := context.Background()
	f, tr := stuckWriter(t, nil)
	res := make(chan error, 1)
	go func() { _, err := tr.Flush(ctx); res <- err }()
	err := within(t, 30*time.Second, res, "Flush(context.Background()) with the store failing every attempt")
	if err == nil || !errors.Is(err, errInjected) {
		t.Fatalf("Flush while every write fails = %v; want the store's error", err)
	}
	landed := f.heal()
	if err := landed(ctx); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := tr.Close(cctx); err != nil {
		t.Fatalf("Close after the store recovered = %v; want nil, the event written", err)
	}
	if st := tr.Stats(); st.Written != 1 {
		t.Fatalf("events written = %d; want 1", st.Written)
	}
}

// Close with a short deadline on an unwritable store gives up and says so;
// a concurrent Flush(context.Background()) then answers with an error
// instead of waiting forever.
func TestFlushAnswersAfterCloseGivesUp(t *testing.T) {
	ctx := context.Background()
	_, tr := stuckWriter(t, nil)
	res := make(chan error, 1)
	go func() { _, err := tr.Flush(ctx); res <- err }()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	if err := tr.Close(cctx); err == nil {
		t.Error("Close that gave up on an unwritten event = nil; want an error")
	}
	if err := within(t, 10*time.Second, res, "Flush(context.Background()) after Close gave up"); err == nil {
		t.Error("Flush whose events were given up = nil; want an error")
	}
}
