package tokenbudget_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/storetest"
)

// openBench opens a fresh database with nKeys keys, each with a global, a
// provider and a model limit large enough never to refuse; the store is the
// default one (WAL, synchronous=NORMAL).
func openBench(b *testing.B, nKeys int, mutate func(*budget.Config)) *tokenbudget.DB {
	b.Helper()
	ctx := context.Background()
	cfg := storetest.BenchConfig(mutate)
	db, err := tokenbudget.Open(ctx, filepath.Join(b.TempDir(), "bench.db"), tokenbudget.Options{Create: true, Config: &cfg})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close(ctx) })
	storetest.SetBenchLimits(b, db.Tracker, nKeys)
	return db
}

func BenchmarkCheckWarm(b *testing.B) {
	db := openBench(b, 1, nil)
	ctx := context.Background()
	if d, err := db.Check(ctx, storetest.BenchReq); err != nil || len(d.Limits) != 3 {
		b.Fatalf("warm-up check = %+v, %v; want 3 limits", d, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if d, _ := db.Check(ctx, storetest.BenchReq); !d.Allowed {
			b.Fatal("refused")
		}
	}
}

// BenchmarkCheckInto is the allocation-free form with the caller's clock:
// statuses go into a buffer the caller reuses, and the instant is the
// caller's, read once per check as a gateway reads it once per request,
// for a key with 3 applicable limits and no team or end user. (A now read
// once before the warm-up would be older than the cache's load, which
// counts as a clock stepped back: every check would re-read the store.)
func BenchmarkCheckInto(b *testing.B) {
	db := openBench(b, 1, nil)
	ctx := context.Background()
	buf := make([]budget.Status, 0, 8)
	if d, err := db.CheckInto(ctx, storetest.BenchReq, time.Now(), buf); err != nil || len(d.Limits) != 3 {
		b.Fatalf("warm-up check = %+v, %v; want 3 limits", d, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		d, _ := db.CheckInto(ctx, storetest.BenchReq, time.Now(), buf)
		if !d.Allowed {
			b.Fatal("refused")
		}
	}
}

func BenchmarkCheckWarmParallel(b *testing.B) {
	db := openBench(b, 1, nil)
	ctx := context.Background()
	db.Check(ctx, storetest.BenchReq)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]budget.Status, 0, 8)
		for pb.Next() {
			if d, _ := db.CheckInto(ctx, storetest.BenchReq, time.Time{}, buf); !d.Allowed {
				b.Error("refused")
				return
			}
		}
	})
}

func BenchmarkRecordEnqueue(b *testing.B) {
	db := openBench(b, 1, func(c *budget.Config) { c.QueueSize = 1 << 22 })
	ctx := context.Background()
	db.Check(ctx, storetest.BenchReq)
	u := budget.Usage{Key: "key-0", Provider: "openai", Model: "gpt-4o", Input: 10, Output: 5}
	b.ReportAllocs()
	b.ResetTimer()
	var i int64
	for b.Loop() {
		i++
		u.RequestID = "r" + strconv.FormatInt(i, 10)
		if err := db.Record(ctx, u); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if _, err := db.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRecordSustained is the writer's throughput: from the first
// Record to the Flush that commits the last, 1,000 keys with 3 limits each.
func BenchmarkRecordSustained(b *testing.B) {
	db := openBench(b, 1000, func(c *budget.Config) { c.QueueSize = 1 << 16 })
	ctx := context.Background()
	ids := make([]string, 0, 1<<16)
	var seq atomic.Int64
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		n := seq.Add(1)
		if len(ids) < cap(ids) {
			ids = append(ids, fmt.Sprintf("req-%d", n))
		}
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
}

// pairKeys is how many keys the Reserve+Commit benchmarks spread their
// requests over, each with the 3 limits of setBenchLimits.
const pairKeys = 1000

// pairReqs are storetest.BenchReq for each of the pairKeys keys.
var pairReqs = func() []budget.Request {
	reqs := make([]budget.Request, pairKeys)
	for k := range reqs {
		reqs[k] = storetest.BenchReq
		reqs[k].Key = storetest.BenchKey(k)
	}
	return reqs
}()

// warmPairs runs one Reserve+Commit pair per key, so the timed pairs find
// every key's limits cached and its counter rows written.
func warmPairs(b *testing.B, t *budget.Tracker) {
	b.Helper()
	ctx := context.Background()
	for _, req := range pairReqs {
		r, err := t.Reserve(ctx, req, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := t.Commit(ctx, r.ID, budget.Usage{Input: 400, Output: 100}); err != nil {
			b.Fatal(err)
		}
	}
}

// runPairs runs b.N Reserve+Commit pairs on t from goroutines goroutines
// (1: a plain loop; more: RunParallel, as a multiple of GOMAXPROCS), the
// requests going round the pairKeys keys, and reports pairs/s.
func runPairs(b *testing.B, t *budget.Tracker, goroutines int) {
	ctx := context.Background()
	pair := func(i int64) error {
		r, err := t.Reserve(ctx, pairReqs[i%pairKeys], time.Minute)
		if err != nil {
			return err
		}
		_, err = t.Commit(ctx, r.ID, budget.Usage{Input: 400, Output: 100})
		return err
	}
	b.ResetTimer()
	start := time.Now()
	if goroutines <= 1 {
		var i int64
		for b.Loop() {
			if err := pair(i); err != nil {
				b.Fatal(err)
			}
			i++
		}
	} else {
		var seq atomic.Int64
		b.SetParallelism(max(1, goroutines/runtimeProcs()))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := pair(seq.Add(1)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	// Sustained, not queued: with leases the commits' events are still
	// the writer's to write when the last Commit returns.
	if _, err := t.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pairs/s")
}

// BenchmarkReserveCommit1 and BenchmarkReserveCommit64 are exact admission:
// Reserve then Commit, 3 limits per request over 1,000 keys (each warmed by
// one pair first), on the default store (WAL, synchronous=NORMAL), from 1
// and 64 goroutines (SetParallelism multiplies GOMAXPROCS: 32 on 2 cores).
func BenchmarkReserveCommit1(b *testing.B) { benchPairs(b, 1) }

func BenchmarkReserveCommit64(b *testing.B) { benchPairs(b, 64) }

func benchPairs(b *testing.B, goroutines int) {
	t := openBench(b, pairKeys, nil).Tracker
	warmPairs(b, t)
	runPairs(b, t, goroutines)
}

// BenchmarkReserveCommitLevels64 is BenchmarkReserveCommit64 with the
// 1,000 keys in 10 teams of one organisation, each team and the
// organisation with a daily limit: 5 holds a reservation, and the team
// and organisation windows shared by every key under them.
func BenchmarkReserveCommitLevels64(b *testing.B) {
	ctx := context.Background()
	t := openBench(b, pairKeys, nil).Tracker
	for team := range 10 {
		name := fmt.Sprintf("team-%d", team)
		if _, err := t.SetTeam(ctx, name, "org"); err != nil {
			b.Fatal(err)
		}
		storetest.SetLimit(b, t, budget.LimitSpec{Team: name, Window: "daily"}, 1<<50)
	}
	storetest.SetLimit(b, t, budget.LimitSpec{Org: "org", Window: "daily"}, 1<<50)
	for k := range pairKeys {
		if err := t.SetKeyTeam(ctx, storetest.BenchKey(k), fmt.Sprintf("team-%d", k%10)); err != nil {
			b.Fatal(err)
		}
	}
	if d, err := t.Check(ctx, pairReqs[0]); err != nil || len(d.Limits) != 5 {
		b.Fatalf("check = %+v, %v; want 5 limits over 3 levels", d, err)
	}
	warmPairs(b, t)
	runPairs(b, t, 64)
}

// BenchmarkRecordDurable64 is the durable mode (synchronous=FULL, Record
// returns once the batch holding its event is fsynced) with 64 concurrent
// callers: group commit makes one fsync serve a whole batch.
func BenchmarkRecordDurable64(b *testing.B) {
	ctx := context.Background()
	cfg := budget.DefaultConfig()
	cfg.SweepInterval = -1
	cfg.RefreshInterval = time.Hour
	db, err := tokenbudget.Open(ctx, filepath.Join(b.TempDir(), "durable.db"), tokenbudget.Options{Create: true, Durable: true, Config: &cfg})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close(ctx) })
	limit := int64(1 << 50)
	if _, _, err := db.SetLimit(ctx, budget.LimitSpec{Key: "key-0", Window: "daily", Max: &limit}); err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	b.SetParallelism(64 / max(1, runtimeProcs()))
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			u := budget.Usage{RequestID: "d" + strconv.FormatInt(seq.Add(1), 10), Key: "key-0", Provider: "openai", Model: "gpt-4o", Input: 10, Output: 5}
			if err := db.Record(ctx, u); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
}
