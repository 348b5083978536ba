// The check against golang.org/x/time/rate, side by side in one run:
//
//	cd bench/peers && go test -run '^$' -bench 'CheckInto3|Rate3' -count 6

package peers

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/time/rate"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/storetest"
)

// BenchmarkCheckInto3 is tokenbudget's root BenchmarkCheckInto: a warm
// check of a key with 3 applicable limits (global, provider, model) into
// a reused buffer, the clock read once per check.
func BenchmarkCheckInto3(b *testing.B) {
	ctx := context.Background()
	cfg := storetest.BenchConfig(nil)
	db, err := tokenbudget.Open(ctx, filepath.Join(b.TempDir(), "bench.db"), tokenbudget.Options{Create: true, Config: &cfg})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close(ctx) })
	storetest.SetBenchLimits(b, db.Tracker, 1)
	buf := make([]budget.Status, 0, 8)
	if d, err := db.CheckInto(ctx, storetest.BenchReq, time.Now(), buf); err != nil || len(d.Limits) != 3 {
		b.Fatalf("warm-up check = %+v, %v; want 3 limits", d, err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if d, _ := db.CheckInto(ctx, storetest.BenchReq, time.Now(), buf); !d.Allowed {
			b.Fatal("refused")
		}
	}
}

// BenchmarkRate3 is the peer: three x/time/rate limiters (one per limit)
// at rates that never refuse. "allow" asks each Allow, as a gateway
// limiting a key three ways would (each reads the clock); "oneclock" reads
// the clock once for the three (AllowN at one instant), as CheckInto does.
func BenchmarkRate3(b *testing.B) {
	for _, oneClock := range []bool{false, true} {
		name := map[bool]string{false: "allow", true: "oneclock"}[oneClock]
		b.Run(name, func(b *testing.B) {
			var ls [3]*rate.Limiter
			for i := range ls {
				ls[i] = rate.NewLimiter(rate.Limit(1e12), 1<<40)
			}
			b.ReportAllocs()
			for b.Loop() {
				var ok bool
				if oneClock {
					now := time.Now()
					ok = ls[0].AllowN(now, 1) && ls[1].AllowN(now, 1) && ls[2].AllowN(now, 1)
				} else {
					ok = ls[0].Allow() && ls[1].Allow() && ls[2].Allow()
				}
				if !ok {
					b.Fatal("refused")
				}
			}
		})
	}
}
