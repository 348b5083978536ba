package sqlite_test

import (
	"context"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// While writes fail (reads still work), a Check of a window whose first
// event is stuck in the writer answers from the store and the queue
// instead of waiting for the writer.
func TestCheckAnswersWhileWritesFail(t *testing.T) {
	ctx := context.Background()
	f := &flaky{Store: openStore(t, tmpDB(t))}
	tr := newTracker(t, f, func(c *budget.Config) { c.Now = fixed })
	max := int64(1000)
	l, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: "k", Window: "1h", Max: &max})
	if err != nil {
		t.Fatal(err)
	}
	req := budget.Request{Key: "k"}
	if _, err := tr.Check(ctx, req); err != nil { // limits cached, this hour's counter loaded
		t.Fatal(err)
	}
	refused := f.breakWrites()
	next := fixed().Add(time.Hour) // the clock moved into the next window
	if err := tr.Record(ctx, budget.Usage{Key: "k", Provider: "p", Model: "m", Input: 1, At: next}); err != nil {
		t.Fatal(err)
	}
	if err := refused(ctx); err != nil { // the writer holds the event in a failing batch
		t.Fatal(err)
	}
	type result struct {
		d   budget.Decision
		err error
	}
	res := make(chan result, 1)
	go func() { d, err := tr.CheckAt(ctx, req, next); res <- result{d, err} }()
	r := within(t, 10*time.Second, res, "CheckAt(context.Background()) with the writer stuck on a failing batch")
	if r.err != nil || len(r.d.Limits) != 1 || r.d.Limits[0].Limit.ID != l.ID || r.d.Limits[0].Used != 1 {
		t.Fatalf("CheckAt while writes fail = %+v, %v; want limit %s with the queued event's 1 used", r.d.Limits, r.err, l.ID)
	}
	landed := f.heal()
	if err := landed(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Flush(ctx); err != nil {
		t.Fatalf("Flush once writes work again = %v", err)
	}
	if u, err := tr.CheckAt(ctx, req, next); err != nil || u.Limits[0].Used != 1 {
		t.Fatalf("CheckAt after the event landed = %+v, %v; want 1 used", u.Limits, err)
	}
}
