package budget_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/budget/internal/faultstore"
)

// A commit whose batch keeps failing is reported to its caller after
// FlushFailures attempts, but the writer keeps it and writes it once the
// store recovers: a charge is never given up while the process lives.
// (Moved from store/sqlite, where it waited on a flaky SQLite wrapper.)
func TestWriterCommitIsNeverGivenUp(t *testing.T) {
	for _, pt := range points {
		t.Run(pt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				failures := make(chan error, 64)
				f, tr := faultTracker(t, func(c *budget.Config) {
					c.OnError = func(err error) {
						select {
						case failures <- err:
						default:
						}
					}
				})
				max := int64(1000)
				l, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "1h", Max: &max})
				if err != nil {
					t.Fatal(err)
				}
				r, err := tr.ReserveWith(ctx, budget.Request{Key: "k", Estimate: budget.Estimate{Input: 10, Output: 10}},
					budget.ReserveOptions{OnExpiry: budget.ExpireCharge})
				if err != nil {
					t.Fatal(err)
				}
				if err := tr.Health(); err != nil {
					t.Fatalf("Health before any failure = %v; want nil", err)
				}
				f.Fail(pt.p, faultstore.Forever, errFull)
				if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 40, Output: 2}); !errors.Is(err, errFull) {
					t.Fatalf("Commit on an unwritable store = %v; want %v", err, errFull)
				}
				if err := tr.Health(); !errors.Is(err, budget.ErrUnhealthy) || !strings.Contains(err.Error(), "injected") {
					t.Fatalf("Health while the writer fails = %v; want ErrUnhealthy naming the cause", err)
				}
				// The writer is still retrying the commit's batch: heal, and
				// wait for the first write that lands.
				<-f.Heal()
				var row budget.ReservationRow
				var used int64
				if err := f.View(ctx, func(tx budget.Tx) error {
					rows, err := tx.Reservations(ctx, []string{r.ID})
					if err != nil {
						return err
					}
					if len(rows) != 1 {
						return fmt.Errorf("reservation %s: %d rows", r.ID, len(rows))
					}
					row = rows[0]
					start := r.At.Truncate(time.Hour)
					used, err = tx.(budget.HistoryTx).SumUsage(ctx, &l, start, start.Add(time.Hour))
					return err
				}); err != nil {
					t.Fatal(err)
				}
				if row.State != budget.ReservationCommitted || used != 42 {
					t.Fatalf("after the store recovered: reservation %s, history %d; want committed and 42", row.State, used)
				}
				if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 1}); !errors.Is(err, budget.ErrSettled) {
					t.Fatalf("second commit = %v; want ErrSettled (the first one landed)", err)
				}
				if err := tr.Health(); err != nil {
					t.Fatalf("Health after recovery = %v; want nil", err)
				}
				if len(failures) == 0 {
					t.Fatal("OnError never saw the injected failures")
				}
				if err := tr.Close(ctx); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// A Reserve whose caller gave up while it waited for the writer returns
// the ctx's error and leaves nothing held: the caller has no id to release.
// (Moved from store/sqlite.)
func TestWriterReserveGivenUpLeavesNoHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, tr := faultTracker(t, nil)
		max := int64(100)
		l, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "1h", Max: &max})
		if err != nil {
			t.Fatal(err)
		}
		g := f.Gate()
		if err := tr.Record(ctx, budget.Usage{Key: "other", Provider: "p", Model: "m", Input: 1}); err != nil {
			t.Fatal(err)
		}
		<-g.Reached() // the writer is busy with the event's batch
		cctx, cancel := context.WithCancel(ctx)
		res := make(chan error, 1)
		go func() {
			_, err := tr.Reserve(cctx, budget.Request{Key: "k", Estimate: budget.Estimate{Tokens: 80}}, time.Hour)
			res <- err
		}()
		synctest.Wait() // the reservation waits in the queue behind the batch
		if q := tr.Stats().QueueDepth; q != 1 {
			t.Fatalf("queue depth %d; want the reservation queued", q)
		}
		cancel()
		if err := <-res; !errors.Is(err, context.Canceled) {
			t.Fatalf("Reserve whose caller gave up = %v; want context.Canceled", err)
		}
		g.Release()
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
		if err := tr.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
