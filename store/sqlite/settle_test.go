package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// A commit whose batch keeps failing is reported to its caller after
// FlushFailures attempts, but the writer keeps it and writes it once the
// store recovers: a charge is never given up while the process lives.
func TestCommitIsNeverGivenUp(t *testing.T) {
	ctx := context.Background()
	f := &flaky{Store: openStore(t, tmpDB(t))}
	failures := make(chan error, 64)
	tr := newTracker(t, f, func(c *budget.Config) {
		c.OnError = func(err error) {
			select {
			case failures <- err:
			default:
			}
		}
	})
	defer tr.Close(ctx)
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
	f.fail.Store(true)
	if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 40, Output: 2}); err == nil {
		t.Fatal("Commit on an unwritable store = nil; want the writer's error")
	}
	if err := tr.Health(); !errors.Is(err, budget.ErrUnhealthy) || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("Health while the writer fails = %v; want ErrUnhealthy naming the cause", err)
	}
	// The writer is still retrying the commit's batch; wait until a write
	// lands, then read the store itself.
	if err := f.heal()(ctx); err != nil {
		t.Fatal(err)
	}
	var row budget.ReservationRow
	var used int64
	err = f.View(ctx, func(tx budget.Tx) error {
		var err error
		rows, err := tx.Reservations(ctx, []string{r.ID})
		if err != nil {
			return err
		}
		if len(rows) != 1 {
			return fmt.Errorf("reservation %s: %d rows", r.ID, len(rows))
		}
		row = rows[0]
		used, err = tx.(budget.HistoryTx).SumUsage(ctx, &l, r.At.Truncate(time.Hour), r.At.Truncate(time.Hour).Add(time.Hour))
		return err
	})
	if err != nil {
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
}

// A database file deleted or replaced under a running store is reported by
// Health: SQLite would keep writing into the unlinked file.
func TestHealthSeesDeletedAndReplacedFile(t *testing.T) {
	path := tmpDB(t)
	s := openStore(t, path)
	defer s.Close()
	if err := s.Health(); err != nil {
		t.Fatalf("Health = %v; want nil", err)
	}
	if err := os.Rename(path, path+".old"); err != nil {
		t.Fatal(err)
	}
	if err := s.Health(); err == nil || !strings.Contains(err.Error(), "deleted") {
		t.Fatalf("Health after the file went away = %v; want it to say deleted", err)
	}
	other := openStore(t, path) // a new file at the same path
	other.Close()
	if err := s.Health(); err == nil || !strings.Contains(err.Error(), "replaced") {
		t.Fatalf("Health after the file was replaced = %v; want it to say replaced", err)
	}
	tr := newTracker(t, s, nil)
	defer tr.Close(context.Background())
	if err := tr.Health(); !errors.Is(err, budget.ErrUnhealthy) {
		t.Fatalf("Tracker.Health = %v; want ErrUnhealthy", err)
	}
}
