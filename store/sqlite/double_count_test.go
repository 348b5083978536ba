package sqlite_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Check never shows more than was recorded nor less than Record
// acknowledged, while the writer commits batches of perBatch events and
// checks refresh the counter from the store (a refresh landing between a
// batch's commit and its cache update must not count the batch twice).
// Each case makes 64 checks; with -stress it runs for 400ms instead.
func TestCheckNeverDoubleCountsOrLosesRecorded(t *testing.T) {
	for _, perBatch := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprint("per", perBatch), func(t *testing.T) {
			s := openStore(t, tmpDB(t))
			for _, refresh := range []time.Duration{0, time.Millisecond} {
				t.Run(fmt.Sprint(refresh), func(t *testing.T) {
					checkWhileRecording(t, s, perBatch, refresh)
				})
			}
		})
	}
}

func checkWhileRecording(t *testing.T, s budget.Store, perBatch int, refresh time.Duration) {
	ctx := context.Background()
	tr := newTracker(t, s, func(c *budget.Config) { c.RefreshInterval = refresh })
	key := fmt.Sprint("k", refresh, perBatch)
	limit := int64(1 << 50)
	if _, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: key, Window: "daily", Max: &limit}); err != nil {
		t.Fatal(err)
	}
	req := budget.Request{Key: key}
	if _, err := tr.Check(ctx, req); err != nil { // cache the limits so Record adds pending
		t.Fatal(err)
	}
	var started, completed atomic.Int64
	stop := make(chan struct{})
	recErr := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				recErr <- nil
				return
			default:
			}
			for range perBatch {
				started.Add(1)
				if err := tr.Record(ctx, budget.Usage{Key: key, Provider: "p", Model: "m", Input: 1}); err != nil {
					recErr <- err
					return
				}
				completed.Add(1)
			}
			// Wait for the group to be written, so each batch holds about
			// perBatch events of this counter.
			if _, err := tr.Flush(ctx); err != nil {
				recErr <- err
				return
			}
		}
	}()
	more := func(i int, deadline time.Time) bool { return i < 64 }
	if *stress {
		more = func(_ int, deadline time.Time) bool { return time.Now().Before(deadline) }
	}
	var over, under int64
	deadline := time.Now().Add(400 * time.Millisecond)
	for i := 0; more(i, deadline); i++ {
		lower := completed.Load()
		d, err := tr.Check(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		upper := started.Load()
		under = max(under, lower-d.Limits[0].Used)
		over = max(over, d.Limits[0].Used-upper)
	}
	close(stop)
	wg.Wait()
	if err := <-recErr; err != nil {
		t.Fatalf("Record or Flush: %v", err)
	}
	if _, err := tr.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if under > 0 {
		t.Errorf("Check showed up to %d less than was acknowledged (lost delta)", under)
	}
	if over > 0 {
		t.Errorf("Check showed up to %d more than was ever recorded (double count)", over)
	}
	d, err := tr.Check(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := d.Limits[0].Used, completed.Load(); got != want {
		t.Errorf("used after the final flush = %d; want %d, every recorded event once", got, want)
	}
}
