package postgres_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
)

// The benchmarks run each shape of the root package's bench_test.go on both
// backends through the same tokenbudget.Open, side by side:
// BenchmarkX/sqlite and BenchmarkX/postgres (skipped without
// BUDGET_TEST_POSTGRES).

var backends = []string{"sqlite", "postgres"}

// benchDSN names a fresh database of the backend for one benchmark.
func benchDSN(b *testing.B, backend string) string {
	if backend == "sqlite" {
		return filepath.Join(b.TempDir(), "bench.db")
	}
	return freshSchema(b)
}

// openBench opens a fresh database with nKeys keys, each with a global, a
// provider and a model limit large enough never to refuse.
func openBench(b *testing.B, backend string, nKeys int, mutate func(*budget.Config)) *tokenbudget.DB {
	b.Helper()
	ctx := context.Background()
	cfg := budget.DefaultConfig()
	cfg.SweepInterval = -1
	cfg.RefreshInterval = time.Hour // warm means warm: no re-reads mid-benchmark
	if mutate != nil {
		mutate(&cfg)
	}
	db, err := tokenbudget.Open(ctx, benchDSN(b, backend), tokenbudget.Options{Create: true, Config: &cfg})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close(ctx) })
	max := int64(1 << 50)
	for k := range nKeys {
		key := fmt.Sprintf("key-%d", k)
		for _, s := range []budget.LimitSpec{
			{Key: key, Window: "daily"},
			{Key: key, Scope: "provider", ScopeValue: "openai", Window: "1h"},
			{Key: key, Scope: "model", ScopeValue: "gpt-4o", Window: "1m", Metric: "input"},
		} {
			s.Max = &max
			if _, _, err := db.SetLimit(ctx, s); err != nil {
				b.Fatal(err)
			}
		}
	}
	return db
}

var benchReq = budget.Request{Key: "key-0", Provider: "openai", Model: "gpt-4o", Estimate: budget.Estimate{Input: 500, Output: 200}}

func eachBackend(b *testing.B, fn func(b *testing.B, backend string)) {
	for _, be := range backends {
		b.Run(be, func(b *testing.B) { fn(b, be) })
	}
}

// BenchmarkCheckWarm: definitions and counters come from the cache.
func BenchmarkCheckWarm(b *testing.B) {
	eachBackend(b, func(b *testing.B, backend string) {
		db := openBench(b, backend, 1, nil)
		ctx := context.Background()
		if d, err := db.Check(ctx, benchReq); err != nil || len(d.Limits) != 3 {
			b.Fatalf("warm-up check = %+v, %v; want 3 limits", d, err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if d, _ := db.Check(ctx, benchReq); !d.Allowed {
				b.Fatal("refused")
			}
		}
	})
}

// BenchmarkCheckCold: RefreshInterval 0, so every check reads the key's
// definitions and its three counters (and holds) from the store, in read
// transactions.
func BenchmarkCheckCold(b *testing.B) {
	eachBackend(b, func(b *testing.B, backend string) {
		db := openBench(b, backend, 1, func(c *budget.Config) { c.RefreshInterval = 0 })
		ctx := context.Background()
		// Give every limit a counter row, as a live gateway's would have.
		if _, err := db.RecordSync(ctx, budget.Usage{Key: "key-0", Provider: "openai", Model: "gpt-4o", Input: 10, Output: 5}); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if d, err := db.Check(ctx, benchReq); err != nil || !d.Allowed {
				b.Fatalf("check = %+v, %v", d, err)
			}
		}
	})
}

// BenchmarkCheckColdSeed: a cold window with no counter row: every check
// sums the key's 1,000 history rows of the day (RefreshInterval 0; checks
// never write, so the row is never created).
func BenchmarkCheckColdSeed(b *testing.B) {
	eachBackend(b, func(b *testing.B, backend string) {
		ctx := context.Background()
		day := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
		cfg := budget.DefaultConfig()
		cfg.SweepInterval = -1
		cfg.RefreshInterval = 0
		db, err := tokenbudget.Open(ctx, benchDSN(b, backend), tokenbudget.Options{Create: true, Config: &cfg})
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close(ctx)
		evs := make([]budget.Usage, 1000)
		for i := range evs {
			evs[i] = budget.Usage{RequestID: "r" + strconv.Itoa(i), Key: "key-0", Provider: "openai", Model: "gpt-4o",
				Input: 100, Output: 20, At: day.Add(time.Duration(i) * time.Minute)}
		}
		if _, err := db.RecordSync(ctx, evs...); err != nil { // no limit yet: history only
			b.Fatal(err)
		}
		max := int64(1 << 50)
		if _, _, err := db.SetLimit(ctx, budget.LimitSpec{Key: "key-0", Window: "daily", Max: &max}); err != nil {
			b.Fatal(err)
		}
		at := day.Add(23 * time.Hour)
		req := budget.Request{Key: "key-0"}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			d, err := db.CheckAt(ctx, req, at)
			if err != nil || d.Limits[0].Used != 1000*120 {
				b.Fatalf("check = %+v, %v", d.Limits, err)
			}
		}
	})
}

// BenchmarkRecordSustained is the writer's throughput: from the first
// Record to the Flush that commits the last, 1,000 keys with 3 limits each.
func BenchmarkRecordSustained(b *testing.B) {
	eachBackend(b, func(b *testing.B, backend string) {
		db := openBench(b, backend, 1000, func(c *budget.Config) { c.QueueSize = 1 << 16 })
		ctx := context.Background()
		var seq atomic.Int64
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			n := seq.Add(1)
			u := budget.Usage{RequestID: fmt.Sprintf("req-%d", n), Key: fmt.Sprintf("key-%d", i%1000), Provider: "openai", Model: "gpt-4o", Input: 10, Output: 5}
			if err := db.Record(ctx, u); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := db.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
		if st := db.Stats(); st.Batches > 0 {
			b.ReportMetric(float64(st.Written)/float64(st.Batches), "events/batch")
		}
	})
}

// BenchmarkReserveCommit1: one goroutine, reserve then commit.
func BenchmarkReserveCommit1(b *testing.B) {
	eachBackend(b, func(b *testing.B, backend string) {
		db := openBench(b, backend, 1, nil)
		ctx := context.Background()
		b.ResetTimer()
		start := time.Now()
		for b.Loop() {
			r, err := db.Reserve(ctx, benchReq, time.Minute)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := db.Commit(ctx, r.ID, budget.Usage{Input: 400, Output: 100}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pairs/s")
	})
}

// BenchmarkReserveCommit64: 64 goroutines (SetParallelism multiplies
// GOMAXPROCS) reserving and committing on one key's limits.
func BenchmarkReserveCommit64(b *testing.B) {
	eachBackend(b, func(b *testing.B, backend string) {
		db := openBench(b, backend, 1, nil)
		ctx := context.Background()
		b.SetParallelism(max(1, 64/runtimeProcs()))
		b.ResetTimer()
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r, err := db.Reserve(ctx, benchReq, time.Minute)
				if err != nil {
					b.Error(err)
					return
				}
				if _, err := db.Commit(ctx, r.ID, budget.Usage{Input: 400, Output: 100}); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pairs/s")
	})
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
