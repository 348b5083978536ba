package budget_test

import (
	"context"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
)

// BenchmarkWriterBatchMemory measures what the writer's batch costs in
// memory, the part of Memory100kKeys' peak the batch holds, without that
// benchmark's run-to-run spread, on SQLite:
//
//	go test -run '^$' -bench WriterBatchMemory -benchtime 65536x ./budget
//
// It measures two shapes of batch. ManyKeys: 8,192 keys (maxBatchKeys)
// with 3 limits of their own (global daily, provider 1h, model 1m), every
// counter cached and its row written, then one event a key over and over,
// as Memory100kKeys' second round records: a batch closes at 8,192 keys
// and holds one event of each. OneKey: one key with a daily limit and a
// daily limit per end user, all its events from one user: a batch closes
// at BatchSize (16,384 events) and counts in 2 windows; what the batch
// sizes by its events rather than its windows shows here.
//
// B/event is what the Record calls and the writer allocate an event
// (the allocation rate the collector paces against); batch_live_B/event is
// the live heap above the idle tracker's while a full batch is about to be
// written or has just been (the larger; a GC at each point), its
// operations included, divided by the batch's events. The clock is fixed
// (Config.Now) and the events at its instant, so every run takes the same
// path whatever the time of day.
func BenchmarkWriterBatchMemory(b *testing.B) {
	limit := int64(1) << 50
	b.Run("ManyKeys", func(b *testing.B) {
		const keys = 8192
		var specs []budget.LimitSpec
		for k := range keys {
			for _, s := range []budget.LimitSpec{{Scope: "global", Window: "daily"}, {Scope: "provider", ScopeValue: "openai", Window: "1h"},
				{Scope: "model", ScopeValue: "gpt-4o", Window: "1m"}} {
				s.Key, s.Max = "key-"+strconv.Itoa(k), &limit
				specs = append(specs, s)
			}
		}
		benchBatchMemory(b, keys, keys, specs, func(i int) budget.Usage {
			return budget.Usage{Key: "key-" + strconv.Itoa(i%keys), Provider: "openai", Model: "gpt-4o", Input: 10, Output: 5}
		})
	})
	b.Run("OneKey", func(b *testing.B) {
		specs := []budget.LimitSpec{{Key: "key-0", Scope: "global", Window: "daily", Max: &limit},
			{Key: "key-0", Scope: "user", ScopeValue: budget.AllUsers, Window: "daily", Max: &limit}}
		benchBatchMemory(b, 1, budget.DefaultBatchSize, specs, func(int) budget.Usage {
			return budget.Usage{Key: "key-0", User: "u-1", Provider: "openai", Model: "gpt-4o", Input: 10, Output: 5}
		})
	})
}

// benchBatchMemory sets specs on keys keys ("key-0"...), caches and writes
// every counter, then records the events ev(i) gives (ev's At is set to
// the fixed clock's instant), batchEvents at a time, and reports what
// BenchmarkWriterBatchMemory says.
func benchBatchMemory(b *testing.B, keys, batchEvents int, specs []budget.LimitSpec, ev func(i int) budget.Usage) {
	ctx := context.Background()
	at := time.Date(2026, 12, 7, 12, 30, 10, 0, time.UTC)
	cfg := budget.DefaultConfig()
	cfg.Now = func() time.Time { return at }
	cfg.SweepInterval = -1
	cfg.RefreshInterval = time.Hour
	cfg.BatchInterval = time.Hour // a batch closes at maxBatchKeys or BatchSize, or on Flush
	cfg.CounterCacheSize = 8 * keys
	cfg.LimitCacheSize = 2 * keys
	db, err := tokenbudget.Open(ctx, filepath.Join(b.TempDir(), "batch.db"), tokenbudget.Options{Create: true, Config: &cfg})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close(ctx)
	for _, s := range specs {
		if _, _, err := db.SetLimit(ctx, s); err != nil {
			b.Fatal(err)
		}
	}
	record := func(i int) {
		u := ev(i)
		u.At = at
		if err := db.Record(ctx, u); err != nil {
			b.Fatal(err)
		}
	}
	flush := func() {
		if _, err := db.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	// Every key's limits and counters cached, and its rows written.
	for k := range keys {
		u := ev(k)
		if _, err := db.CheckAt(ctx, budget.Request{Key: u.Key, User: u.User, Provider: u.Provider, Model: u.Model}, at); err != nil {
			b.Fatal(err)
		}
		record(k)
	}
	flush()
	var ms runtime.MemStats
	liveHeap := func() uint64 {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}

	// One full batch, its live heap at both points.
	idle := liveHeap()
	var peak uint64
	undo := budget.SetBatchHook(db.Tracker, func() { peak = max(peak, liveHeap()) })
	for i := range batchEvents {
		record(i)
	}
	flush()
	undo()

	runtime.ReadMemStats(&ms)
	alloc := ms.TotalAlloc
	b.ResetTimer()
	for i := range b.N {
		record(i)
	}
	flush()
	b.StopTimer()
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.TotalAlloc-alloc)/float64(b.N), "B/event")
	b.ReportMetric(float64(int64(peak)-int64(idle))/float64(batchEvents), "batch_live_B/event")
}
