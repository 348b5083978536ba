package store_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// Used must never exceed what was enqueued: a refresh landing between a
// batch's commit and its EndCommit must not count the batch twice.
func TestNoDoubleCount(t *testing.T) {
	for _, perBatch := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprint("per", perBatch), func(t *testing.T) {
			ctx := context.Background()
			s := openStore(t, tmpDB(t))
			for _, refresh := range refreshes {
				t.Run(fmt.Sprint(refresh), func(t *testing.T) {
					tr := newTracker(t, s, func(c *budget.Config) { c.RefreshInterval = refresh })
					defer tr.Close(ctx)
					key := fmt.Sprint("k", refresh, perBatch)
					max := int64(1 << 50)
					if _, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: key, Window: "daily", Max: &max}); err != nil {
						t.Fatal(err)
					}
					req := budget.Request{Key: key}
					tr.Check(ctx, req) // cache the limits so Record adds pending
					var started, completed atomic.Int64
					stop := make(chan struct{})
					var wg sync.WaitGroup
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; ; i++ {
							select {
							case <-stop:
								return
							default:
							}
							for j := 0; j < perBatch; j++ { // two events per batch on one counter
								started.Add(1)
								if err := tr.Record(ctx, budget.Usage{Key: key, Provider: "p", Model: "m", Input: 1}); err != nil {
									t.Error(err)
									return
								}
								completed.Add(1)
							}
							time.Sleep(sleepBetween)
						}
					}()
					var worst, under int64
					deadline := time.Now().Add(runFor)
					for time.Now().Before(deadline) {
						lower := completed.Load()
						d, err := tr.Check(ctx, req)
						if err != nil {
							t.Fatal(err)
						}
						bound := started.Load()
						if u := lower - d.Limits[0].Used; u > under {
							under = u
						}
						if over := d.Limits[0].Used - bound; over > worst {
							worst = over
						}
					}
					close(stop)
					wg.Wait()
					tr.Flush(ctx)
					if under > 0 {
						t.Errorf("Check showed up to %d less than was acknowledged (lost delta)", under)
					}
					if worst > 0 {
						t.Errorf("Check showed up to %d more than was ever recorded (double count)", worst)
					}
				})
			}
		})
	}
}
