package tokenbudget_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
)

// A gateway opens the database once, sets a daily budget for an API key,
// checks each request, records what it really spent, and reserves when it
// must never overshoot.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "tokenbudget-example")
	defer os.RemoveAll(dir)

	now := time.Date(2026, 3, 2, 18, 0, 0, 0, time.UTC)
	cfg := budget.DefaultConfig()
	cfg.Now = func() time.Time { return now }
	db, err := tokenbudget.Open(ctx, filepath.Join(dir, "budget.db"), tokenbudget.Options{Create: true, Config: &cfg})
	if err != nil {
		panic(err)
	}
	defer db.Close(ctx)

	max := int64(1000)
	if _, _, err := db.SetLimit(ctx, budget.LimitSpec{ID: "daily", Key: "team-a", Window: "daily", Max: &max}); err != nil {
		panic(err)
	}

	// Fast path: check, forward, record off the request path.
	req := budget.Request{Key: "team-a", Provider: "openai", Model: "gpt-4o-mini", Estimate: budget.Estimate{Tokens: 400}}
	d, _ := db.Check(ctx, req)
	fmt.Println("allowed:", d.Allowed)
	_ = db.Record(ctx, budget.Usage{Key: "team-a", Provider: "openai", Model: "gpt-4o-mini", Input: 300, Output: 50, Reasoning: 20})
	d, _ = db.Check(ctx, req)
	fmt.Println("used:", d.Limits[0].Used, "remaining:", d.Limits[0].Remaining())

	// Exact path: hold the estimate, then settle with the actual usage.
	r, err := db.Reserve(ctx, req, time.Minute)
	if err != nil {
		panic(err)
	}
	_, _ = db.Commit(ctx, r.ID, budget.Usage{Input: 250, Output: 30})
	_, err = db.Reserve(ctx, req, time.Minute)
	var ex *budget.ExceededError
	if errors.As(err, &ex) {
		b := ex.Decision.Breach
		fmt.Println("refused by", b.Limit.ID, "used", b.Used, "retry after", b.RetryAfterSeconds(), "s")
	}
	// Output:
	// allowed: true
	// used: 370 remaining: 630
	// refused by daily used 650 retry after 21600 s
}
