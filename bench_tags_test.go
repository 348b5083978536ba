package tokenbudget_test

import (
	"context"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/storetest"
)

// BenchmarkCheckTagged is BenchmarkCheckInto for a request with two tags
// (sent normalized, as a library caller can) under a fourth limit that
// counts each value of one of them: what tags add to a warm check.
func BenchmarkCheckTagged(b *testing.B) {
	db := openBench(b, 1, nil)
	ctx := context.Background()
	max := int64(1 << 50)
	if _, _, err := db.SetLimit(ctx, budget.LimitSpec{Key: storetest.BenchReq.Key, Scope: "tag", ScopeValue: "project=*", Window: "1h", Max: &max}); err != nil {
		b.Fatal(err)
	}
	req := storetest.BenchReq
	req.Tags = "feature=search,project=atlas"
	buf := make([]budget.Status, 0, 8)
	if d, err := db.CheckInto(ctx, req, time.Now(), buf); err != nil || len(d.Limits) != 4 {
		b.Fatalf("warm-up check = %+v, %v; want 4 limits", d, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		d, _ := db.CheckInto(ctx, req, time.Now(), buf)
		if !d.Allowed {
			b.Fatal("refused")
		}
	}
}
