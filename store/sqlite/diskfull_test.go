package sqlite_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/tokenbudget/tokenbudget/budget"
)

// fill writes a file in dir until the file system is full and returns its
// path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return p
			}
			t.Fatal(err)
		}
	}
}

// With the disk full, usage and commits wait in the writer, Health says
// "disk full", and once space is back everything lands: nothing recorded
// or committed is given up. Needs root for a small tmpfs. What is SQLite's
// here is the real SQLITE_FULL and its "disk full" message; the writer's
// side (retry, backoff, failure reporting, nothing dropped) is tested on
// every failure point in budget's TestWriterFailingStoreThenHealedDropsNothing.
func TestDiskFullThenSpaceBack(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs (CI runs as root)")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount: %v: %s", err, out)
		}
	})
	ctx := context.Background()
	s := &landing{Store: openStore(t, filepath.Join(dir, "b.db"))}
	t.Cleanup(func() { s.Close() }) // before the unmount
	tr := newTracker(t, s, nil)
	defer tr.Close(ctx)
	max := int64(1 << 40)
	l, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "daily", Max: &max})
	if err != nil {
		t.Fatal(err)
	}
	// A few commits: each waits out the writer's failures on the full
	// disk; how many is not the point (budget's writer tests cover that).
	const commits = 5
	var ids []string
	for range commits {
		r, err := tr.ReserveWith(ctx, budget.Request{Key: "k", Estimate: budget.Estimate{Input: 10, Output: 10}},
			budget.ReserveOptions{OnExpiry: budget.ExpireCharge})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	filler := fill(t, dir)
	// Enough new rows that SQLite needs pages the disk no longer has.
	pad := strings.Repeat("x", 200)
	for i := range 2000 {
		if err := tr.Record(ctx, budget.Usage{RequestID: pad + strconv.Itoa(i), Key: "k", Provider: "p", Model: "m", Input: 1}); err != nil {
			t.Fatal(err)
		}
	}
	failed := 0
	for _, id := range ids {
		// Some may land before the disk is exhausted; the rest fail.
		if _, err := tr.Commit(ctx, id, budget.Usage{Input: 5, Output: 5}); err != nil {
			failed++
		}
	}
	if failed == 0 {
		t.Fatal("every commit landed: the disk never filled, the test proves nothing")
	}
	if err := tr.Health(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Health with the disk full = %v; want it to say disk full", err)
	}
	landed := s.next()
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// Flush answers with the error while the writer's failure streak lasts
	// (its own flush still runs later); once a batch landed it returns nil.
	for attempt := 0; ; attempt++ {
		if err := landed(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := tr.Flush(ctx); err == nil {
			break
		} else if attempt > 10 {
			t.Fatalf("Flush after space came back: %v", err)
		}
		landed = s.next()
	}
	d, err := tr.CheckAt(ctx, budget.Request{Key: "k"}, tr.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := d.Limits[0].Used, int64(2000+commits*10); got != want || d.Limits[0].Limit.ID != l.ID {
		t.Fatalf("used after space came back = %d; want %d (every event and every commit)", got, want)
	}
	if drift, err := tr.Verify(ctx); err != nil || len(drift) != 0 {
		t.Fatalf("Verify = %v, %v", drift, err)
	}
}
