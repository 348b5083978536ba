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
// benchmark's run-to-run spread: 8,192 keys (maxBatchKeys) with 3 limits
// of their own (global daily, provider 1h, model 1m), every counter cached
// and its row written, then one event a key over and over on SQLite, as
// Memory100kKeys' second round records. BatchInterval is long, so every
// batch closes at 8,192 keys: a batch holds one event of each key.
//
//	go test -run '^$' -bench WriterBatchMemory -benchtime 65536x ./budget
//
// B/event is what the Record calls and the writer allocate an event
// (the allocation rate the collector paces against); batch_live_B/event is
// the live heap above the idle tracker's while a batch of 8,192 events is
// about to be written or has just been (the larger; a GC at each point),
// its operations included.
func BenchmarkWriterBatchMemory(b *testing.B) {
	const keys = 8192
	ctx := context.Background()
	cfg := budget.DefaultConfig()
	cfg.SweepInterval = -1
	cfg.RefreshInterval = time.Hour
	cfg.BatchInterval = time.Hour // a batch closes at maxBatchKeys, or on Flush
	cfg.CounterCacheSize = 8 * keys
	cfg.LimitCacheSize = 2 * keys
	db, err := tokenbudget.Open(ctx, filepath.Join(b.TempDir(), "batch.db"), tokenbudget.Options{Create: true, Config: &cfg})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close(ctx)
	limit := int64(1) << 50
	for k := range keys {
		key := "key-" + strconv.Itoa(k)
		for _, s := range []budget.LimitSpec{{Scope: "global", Window: "daily"}, {Scope: "provider", ScopeValue: "openai", Window: "1h"},
			{Scope: "model", ScopeValue: "gpt-4o", Window: "1m"}} {
			s.Key, s.Max = key, &limit
			if _, _, err := db.SetLimit(ctx, s); err != nil {
				b.Fatal(err)
			}
		}
	}
	at := time.Now().UTC().Truncate(time.Minute).Add(-50 * time.Second)
	record := func(k int) {
		u := budget.Usage{Key: "key-" + strconv.Itoa(k), Provider: "openai", Model: "gpt-4o", Input: 10, Output: 5, At: at}
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
		if _, err := db.CheckAt(ctx, budget.Request{Key: "key-" + strconv.Itoa(k), Provider: "openai", Model: "gpt-4o"}, at); err != nil {
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

	// One batch, its live heap at both points.
	idle := liveHeap()
	var peak uint64
	undo := budget.SetBatchHook(func() { peak = max(peak, liveHeap()) })
	for k := range keys {
		record(k)
	}
	flush()
	undo()

	runtime.ReadMemStats(&ms)
	alloc := ms.TotalAlloc
	b.ResetTimer()
	for i := range b.N {
		record(i % keys)
	}
	flush()
	b.StopTimer()
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.TotalAlloc-alloc)/float64(b.N), "B/event")
	b.ReportMetric(float64(int64(peak)-int64(idle))/keys, "batch_live_B/event")
}
