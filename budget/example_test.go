package budget_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/budget/internal/memstore"
)

// A request reserves its estimate before it calls the provider and commits
// what it spent after; a reservation that does not fit holds nothing and is
// refused with the limit it breached. (The example runs on the in-memory
// store the package's tests use; a program opens SQLite or PostgreSQL with
// tokenbudget.Open or postgres.Open.)
func ExampleTracker_Reserve() {
	ctx := context.Background()
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	cfg := budget.DefaultConfig()
	cfg.Now = func() time.Time { return now }
	cfg.SweepInterval = -1
	tr, err := budget.New(ctx, memstore.New(), cfg)
	if err != nil {
		panic(err)
	}
	defer tr.Close(ctx)

	max := int64(1000)
	if _, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: "app", Window: "daily", Max: &max}); err != nil {
		panic(err)
	}
	req := budget.Request{Key: "app", Provider: "openai", Model: "gpt-4o",
		Estimate: budget.Estimate{Input: 200, Output: 400}}

	first, err := tr.Reserve(ctx, req, time.Minute)
	if err != nil {
		panic(err)
	}
	fmt.Println("first: admitted")

	// 600 are held: a second request of 600 does not fit in 1000.
	_, err = tr.Reserve(ctx, req, time.Minute)
	var ex *budget.ExceededError
	if errors.As(err, &ex) {
		s := ex.Decision.Breach
		fmt.Printf("second: refused, used %d + reserved %d + 600 > %d\n", s.Used, s.Reserved, s.Max)
	}

	// The first request spent 250 of its 600: the rest is free again.
	if _, err := tr.Commit(ctx, first.ID, budget.Usage{Input: 200, Output: 50}); err != nil {
		panic(err)
	}
	d, err := tr.Check(ctx, budget.Request{Key: "app"})
	if err != nil {
		panic(err)
	}
	fmt.Printf("after commit: used %d, remaining %d\n", d.Limits[0].Used, d.Limits[0].Remaining())

	// Output:
	// first: admitted
	// second: refused, used 0 + reserved 600 + 600 > 1000
	// after commit: used 250, remaining 750
}
