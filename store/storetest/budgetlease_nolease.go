package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

func init() {
	extra = append(extra, suiteCase{"BudgetLeaseNoLeaseTakesTheStorePath", testBudgetLeaseNoLease})
}

// A reservation made with NoLease while the route's lease could carve it
// takes the store's path: it is a row of its own, which another Tracker
// (another process: the CLI's reserve and commit) renews and commits by
// id, and the leasing tracker then finds settled. A carved reservation,
// by contrast, has no row another tracker could find.
func testBudgetLeaseNoLease(t *testing.T, newDB NewDB) {
	a, b, c, l := leasingAndReading(t, newDB)
	ctx := context.Background()
	var carved string
	for range 3 { // the first holds its own reservation, then the lease
		r, err := a.Reserve(ctx, leaseReq(100), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		carved = r.ID
	}
	leased := a.Stats().Leased
	if leased == 0 {
		t.Fatal("no reservation came from the lease: the case would prove nothing")
	}
	r, err := a.ReserveWith(ctx, leaseReq(100), budget.ReserveOptions{TTL: time.Minute, NoLease: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := a.Stats().Leased; n != leased {
		t.Fatalf("a NoLease reservation was carved from the lease (leased %d -> %d)", leased, n)
	}
	if _, err := b.Renew(ctx, carved, time.Minute); !errors.Is(err, budget.ErrNotFound) {
		t.Fatalf("another tracker's Renew of a carved reservation = %v; want ErrNotFound (it has no row)", err)
	}
	if _, err := b.Renew(ctx, r.ID, 2*time.Minute); err != nil {
		t.Fatalf("another tracker's Renew of the NoLease reservation: %v; want its row renewed", err)
	}
	s, err := b.Commit(ctx, r.ID, budget.Usage{Input: 30, Output: 40})
	if err != nil || s.RequestID != r.ID || s.Expired {
		t.Fatalf("another tracker's Commit of the NoLease reservation = %+v, %v", s, err)
	}
	if _, err := a.Commit(ctx, r.ID, budget.Usage{Input: 30, Output: 40}); !errors.Is(err, budget.ErrSettled) {
		t.Fatalf("the reserving tracker's Commit after another's = %v; want ErrSettled", err)
	}
	if used, _ := Used(t, b, leaseReq(100), c.Now(), l.ID); used != 70 {
		t.Fatalf("used after the NoLease reservation's commit elsewhere: %d; want 70", used)
	}
	noDrift(t, b)
}
