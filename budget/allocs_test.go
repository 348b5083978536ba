//go:build !race

package budget_test

import (
	"context"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// TestCheckIntoAllocs: a warm CheckInto into a reused buffer allocates
// nothing, on every route a key's requests take (up to the few a key
// remembers) and with an end user. (The race detector's instrumentation
// allocates, hence the build tag.)
func TestCheckIntoAllocs(t *testing.T) {
	tr := checkTracker(t)
	ctx := context.Background()
	reqs := []budget.Request{
		{Key: "k", Provider: "openai", Model: "gpt-4o", Estimate: budget.Estimate{Input: 10, Output: 5}},
		{Key: "k", Provider: "openai", Model: "GPT-4o-2024-08-06", User: "ann"},
		{Key: "k", Provider: "anthropic", Model: "claude", User: "bob"},
	}
	buf := make([]budget.Status, 0, 8)
	for range 3 { // warm the key, its routes and their providers' parking state
		for _, req := range reqs {
			if _, err := tr.CheckInto(ctx, req, time.Now(), buf); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, req := range reqs {
		if n := testing.AllocsPerRun(200, func() {
			if d, err := tr.CheckInto(ctx, req, time.Now(), buf); err != nil || !d.Allowed {
				t.Fatalf("CheckInto(%+v) = %+v, %v", req, d, err)
			}
		}); n != 0 {
			t.Errorf("CheckInto(%+v) allocates %v times a call; want 0", req, n)
		}
	}
}
