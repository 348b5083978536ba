package dashboard_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/dashboard"
)

// TestLeasedRoomShownReserved: the overview's bar of a limit a tracker
// holds a lease on shows the lease's whole hold as reserved, its free room
// included, as another process's Inspect of the database does: more than
// the reservations then live hold, and drawn at its width. Used is what
// was committed.
func TestLeasedRoomShownReserved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "budget.db")
	cfg := budget.DefaultConfig()
	cfg.Now = func() time.Time { return now }
	cfg.Leases = true
	db, err := tokenbudget.Open(ctx, path, tokenbudget.Options{Create: true, Config: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	f := &fixture{db: db}
	f.limit(t, budget.LimitSpec{ID: "lim_lease", Key: "app", Window: "1h"}, 100_000)
	req := budget.Request{Key: "app", Provider: "openai", Model: "gpt-4o-mini", Estimate: budget.Estimate{Input: 10, Output: 40}}
	var live []*budget.Reservation
	for range 4 {
		r, err := db.ReserveWith(ctx, req, budget.ReserveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, r)
	}
	if _, err := db.Commit(ctx, live[0].ID, budget.Usage{Input: 8, Output: 30}); err != nil {
		t.Fatal(err)
	}
	live = live[1:]
	if _, err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if db.Stats().Leased == 0 {
		t.Fatal("no reservation came from a lease")
	}

	other, err := tokenbudget.Open(ctx, path, tokenbudget.Options{Config: &budget.Config{Now: cfg.Now, SweepInterval: -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	rep, err := other.Inspect(ctx, "app", now, 0)
	if err != nil || len(rep.Limits) != 1 {
		t.Fatalf("inspect from another handle: %v %+v", err, rep)
	}
	stored := rep.Limits[0]
	if stored.Used != 38 || stored.Reserved <= int64(len(live))*50 {
		t.Fatalf("stored: used %d reserved %d; want 38 and more than the %d live reservations' %d", stored.Used, stored.Reserved, len(live), len(live)*50)
	}
	_, body := get(t, f.handler(t, dashboard.Config{}), "/")
	bs := bars(t, body)
	if len(bs) != 1 || bs[0].id != "lim_lease" || bs[0].used != stored.Used || bs[0].reserved != stored.Reserved || bs[0].max != 100_000 {
		t.Fatalf("the overview's bars %+v; want lim_lease used %d reserved %d of 100,000, as stored", bs, stored.Used, stored.Reserved)
	}
	if want := float64(stored.Reserved) / 100_000 * dashboard.BarUnits; !near(bs[0].reservedW, want) {
		t.Errorf("the reserved part of the bar is %g wide; want %g", bs[0].reservedW, want)
	}
}
