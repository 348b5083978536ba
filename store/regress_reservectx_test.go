package store_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

type slow struct {
	budget.Store
	delay atomic.Int64
}

func (s *slow) Update(ctx context.Context, fn func(budget.Tx) error) error {
	time.Sleep(time.Duration(s.delay.Load()))
	return s.Store.Update(ctx, fn)
}

func TestReserveAfterCallerGaveUp(t *testing.T) {
	ctx := context.Background()
	s := &slow{Store: openStore(t, tmpDB(t))}
	tr := newTracker(t, s, nil)
	defer tr.Close(ctx)
	max := int64(100)
	l, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "1h", Max: &max})
	if err != nil {
		t.Fatal(err)
	}
	s.delay.Store(int64(300 * time.Millisecond))
	tr.Record(ctx, budget.Usage{Key: "other", Provider: "p", Model: "m", Input: 1}) // occupies the writer
	time.Sleep(10 * time.Millisecond)
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = tr.Reserve(cctx, budget.Request{Key: "k", Estimate: budget.Estimate{Tokens: 80}}, time.Hour)
	t.Logf("Reserve returned %v", err)
	s.delay.Store(0)
	tr.Flush(ctx)
	d, _ := tr.Check(ctx, budget.Request{Key: "k"})
	for _, st := range d.Limits {
		if st.Limit.ID == l.ID && st.Reserved > 0 {
			t.Errorf("the caller got %v, yet %d tokens are held on %s (for the whole TTL, with no id to release)", err, st.Reserved, l.ID)
		}
	}
}
