package tokenbudget_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/storetest"
)

// BenchmarkRecordStatements counts, at the driver, the SQL statements the
// writer runs per event recorded, with storetest.SetBenchLimits' three
// limits (daily, hourly, per minute) on each key:
//
//	go test -run '^$' -bench RecordStatements -benchtime 20000x .
//
// Sustained is RecordSustained's shape: 1,000 keys, every event now, so
// each key's three windows are created once and then only added to.
// Spread1000 and Spread10000 are BenchmarkImport's: 50 keys, events spread
// evenly over the 24 hours before now (a per-minute window opens nearly
// every third event of a key), written by RecordSync calls of 1,000 or
// 10,000 events.
//
// stmts/event is the writer's statements per event, stmts/batch per
// committed write transaction; neither counts BEGIN and COMMIT, nor a
// statement's preparation.
func BenchmarkRecordStatements(b *testing.B) {
	b.Run("Sustained", func(b *testing.B) {
		t, stop := countingTracker(b, 1000)
		defer stop()
		ctx := context.Background()
		w0, batches0 := counted.write.stmts.Load(), t.Stats().Batches
		for i := range b.N {
			u := budget.Usage{RequestID: fmt.Sprintf("req-%d", i), Key: storetest.BenchKey(i % 1000), Provider: "openai", Model: "gpt-4o", Input: 10, Output: 5}
			if err := t.Record(ctx, u); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := t.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		reportStatements(b, counted.write.stmts.Load()-w0, t.Stats().Batches-batches0)
	})
	for _, size := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("Spread%d", size), func(b *testing.B) {
			t, stop := countingTracker(b, 50)
			defer stop()
			ctx := context.Background()
			now := time.Now()
			start, step := now.Add(-24*time.Hour), 24*time.Hour/time.Duration(b.N)
			w0, batches0 := counted.write.stmts.Load(), t.Stats().Batches
			batch := make([]budget.Usage, 0, size)
			for i := range b.N {
				batch = append(batch, budget.Usage{RequestID: fmt.Sprintf("req-%d", i), Key: storetest.BenchKey(i % 50), Provider: "openai", Model: "gpt-4o",
					Input: 100, Output: 20, At: start.Add(time.Duration(i) * step)})
				if len(batch) == size || i == b.N-1 {
					if _, err := t.RecordSync(ctx, batch...); err != nil {
						b.Fatal(err)
					}
					batch = batch[:0]
				}
			}
			reportStatements(b, counted.write.stmts.Load()-w0, t.Stats().Batches-batches0)
		})
	}
}

// countingTracker is a Tracker on a store whose statements are counted,
// with the three bench limits on each of nKeys keys.
func countingTracker(b *testing.B, nKeys int) (*budget.Tracker, func()) {
	ctx := context.Background()
	s := openCountingStore(b)
	t, err := budget.New(ctx, s, storetest.BenchConfig(func(c *budget.Config) { c.QueueSize = 1 << 16 }))
	if err != nil {
		s.Close()
		b.Fatal(err)
	}
	storetest.SetBenchLimits(b, t, nKeys)
	b.ResetTimer()
	return t, func() {
		t.Close(ctx)
		s.Close()
	}
}

func reportStatements(b *testing.B, stmts, batches int64) {
	b.StopTimer()
	b.ReportMetric(float64(stmts)/float64(b.N), "stmts/event")
	if batches > 0 {
		b.ReportMetric(float64(stmts)/float64(batches), "stmts/batch")
		b.ReportMetric(float64(b.N)/float64(batches), "events/batch")
	}
}
