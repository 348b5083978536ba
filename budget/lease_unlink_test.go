package budget_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/budget/internal/memstore"
)

// failFirstLease is a store whose first write transaction that creates a
// lease row fails (nothing of it lands); the next transaction notes
// whether that lease's journal name, linked before its row was written,
// is still there once the writer handled the failure.
type failFirstLease struct {
	budget.Store
	dir string

	mu       sync.Mutex
	failed   []string // the lease ids of the failed transaction
	linked   bool     // their names existed when it failed
	checked  bool
	leftOver []string // their names still there at the next transaction
}

func (s *failFirstLease) Update(ctx context.Context, fn func(budget.Tx) error) error {
	s.mu.Lock()
	if s.failed != nil && !s.checked {
		s.checked = true
		for _, id := range s.failed {
			if _, err := os.Stat(filepath.Join(s.dir, id+".journal")); err == nil {
				s.leftOver = append(s.leftOver, id)
			}
		}
	}
	s.mu.Unlock()
	return s.Store.Update(ctx, func(tx budget.Tx) error { return fn(&failLeaseTx{fullTx: tx.(fullTx), s: s}) })
}

type failLeaseTx struct {
	fullTx
	s *failFirstLease
}

func (t *failLeaseTx) Apply(ctx context.Context, ws *budget.WriteSet) ([]bool, int64, error) {
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed == nil {
		var ids []string
		for _, r := range ws.NewReservations {
			if strings.HasPrefix(r.ID, "lse_") {
				ids = append(ids, r.ID)
			}
		}
		if ids != nil {
			s.failed, s.linked = ids, true
			for _, id := range ids {
				if _, err := os.Stat(filepath.Join(s.dir, id+".journal")); err != nil {
					s.linked = false
				}
			}
			return nil, 0, errBoom
		}
	}
	return t.fullTx.Apply(ctx, ws)
}

// A write transaction that creates a lease row and fails (it did not
// land) removes the lease's journal name at once, rather than leaving it
// for the stale sweep to find rowless for a minute.
func TestFailedLeaseTryRemovesItsJournalNamesAtOnce(t *testing.T) {
	dir := t.TempDir()
	s := &failFirstLease{Store: memstore.New(), dir: dir}
	c := &testClock{t: time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)}
	tr := storeTracker(t, s, func(cfg *budget.Config) {
		cfg.Now, cfg.Leases, cfg.LeaseJournal, cfg.MaxRetryBackoff = c.Now, true, dir, time.Millisecond
	})
	max := int64(1 << 40)
	if _, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "daily", Max: &max}); err != nil {
		t.Fatal(err)
	}
	req := budget.Request{Key: "k", Provider: "p", Model: "m", Estimate: budget.Estimate{Input: 50, Output: 50}}
	opts := budget.ReserveOptions{TTL: 20 * time.Second, OnExpiry: budget.ExpireCharge}
	for i := 0; ; i++ { // the first takes the store's path, a later one a lease
		r, err := tr.ReserveWith(ctx, req, opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tr.Commit(ctx, r.ID, budget.Usage{Input: 10, Output: 20}); err != nil {
			t.Fatal(err)
		}
		if _, err := tr.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		done := s.checked
		s.mu.Unlock()
		if done {
			break
		}
		if i == 5 {
			t.Fatal("no write transaction created a lease row")
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.linked {
		t.Fatalf("lease %v: no journal name when its row was written; want it linked first", s.failed)
	}
	if len(s.leftOver) != 0 {
		t.Fatalf("journal names of leases %v left after their transaction failed; want them removed before the next try", s.leftOver)
	}
}
