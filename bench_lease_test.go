package tokenbudget_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/storetest"
)

// The same pairs as BenchmarkReserveCommit1 and 64 with budget leases on
// (Config.Leases, the journal beside the database): most reservations are
// carved from a per-key lease in memory, and commits reach the store in
// the writer's batches.
//
//	go test -run '^$' -bench 'ReserveCommit(1|64)' -count 6 .
func BenchmarkReserveCommit1Leases(b *testing.B) { benchLeasedPairs(b, 1) }

func BenchmarkReserveCommit64Leases(b *testing.B) { benchLeasedPairs(b, 64) }

// BenchmarkReserveCommit1Durable and ...DurableLeases are one goroutine's
// pairs in Durable mode (synchronous=FULL): on the store's path every
// transaction is fsynced; with leases every journal record is
// (fdatasync) before its Reserve or Commit returns. Over durableKeys keys,
// not 1,000: a route's lease gives its room back after LeaseIdle unused,
// and a pair that waits for two syncs cannot come round 1,000 keys within
// it, so every pair would refill through the writer.
//
//	go test -run '^$' -bench 'ReserveCommit1Durable' -count 6 .
func BenchmarkReserveCommit1Durable(b *testing.B) { benchDurablePairs(b, false) }

func BenchmarkReserveCommit1DurableLeases(b *testing.B) { benchDurablePairs(b, true) }

const durableKeys = 100

func benchDurablePairs(b *testing.B, leases bool) {
	ctx := context.Background()
	cfg := storetest.BenchConfig(func(c *budget.Config) { c.Leases = leases })
	db, err := tokenbudget.Open(ctx, filepath.Join(b.TempDir(), "bench.db"), tokenbudget.Options{Create: true, Durable: true, Config: &cfg})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close(ctx) })
	storetest.SetBenchLimits(b, db.Tracker, durableKeys)
	pair := func(i int) {
		r, err := db.Reserve(ctx, pairReqs[i%durableKeys], time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := db.Commit(ctx, r.ID, budget.Usage{Input: 400, Output: 100}); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 2 * durableKeys { // the second round takes the leases
		pair(i)
	}
	b.ResetTimer()
	start := time.Now()
	i := 0
	for b.Loop() {
		pair(i)
		i++
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pairs/s")
	b.StopTimer()
	b.ReportMetric(float64(db.Stats().Leased)/float64(b.N), "leased/pair")
}

func benchLeasedPairs(b *testing.B, goroutines int) {
	t := openBench(b, pairKeys, func(c *budget.Config) { c.Leases = true }).Tracker
	warmPairs(b, t)
	warmLeases(b, t, goroutines)
	before := t.Stats()
	runPairs(b, t, goroutines)
	b.StopTimer()
	after := t.Stats()
	b.ReportMetric(float64(after.Leased-before.Leased)/float64(b.N), "leased/pair")
	// What bounds the sustained figure: the writer's transactions, each
	// writing this many pairs' events (and shrinking each lease they came
	// from).
	b.ReportMetric(float64(b.N)/float64(max(after.Batches-before.Batches, 1)), "pairs/batch")
}

// warmLeases is storetest.WarmLeases over the pairKeys keys.
func warmLeases(b *testing.B, t *budget.Tracker, goroutines int) {
	b.Helper()
	ctx := context.Background()
	storetest.WarmLeases(b, t, pairKeys, goroutines, func(k int) error {
		r, err := t.Reserve(ctx, pairReqs[k], time.Minute)
		if err != nil {
			return err
		}
		_, err = t.Commit(ctx, r.ID, budget.Usage{Input: 400, Output: 100})
		return err
	})
}

// BenchmarkReserveLeased is one Reserve answered from a lease (with its
// journal record), released again so the lease never runs out: ns/op and
// allocs/op are the pair's; "p50-ns" is the Reserve alone, each one timed.
func BenchmarkReserveLeased(b *testing.B) {
	t := openBench(b, 1, func(c *budget.Config) { c.Leases = true }).Tracker
	ctx := context.Background()
	req := pairReqs[0]
	// The route's first reservation is its own, the second takes the lease.
	var warm [2]*budget.Reservation
	for i := range warm {
		r, err := t.Reserve(ctx, req, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		warm[i] = r
	}
	samples := make([]time.Duration, 0, 1<<20)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		r, err := t.Reserve(ctx, req, time.Minute)
		d := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if len(samples) < cap(samples) {
			samples = append(samples, d)
		}
		if err := t.Release(ctx, r.ID); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	// The lease is replaced (one Reserve on the writer's path) each time
	// its journal generation fills: one in about 240,000 pairs here.
	if st := t.Stats(); st.Leased < int64(b.N)-int64(b.N)/100_000-1 {
		b.Fatalf("%d of %d reservations came from the lease", st.Leased, b.N)
	}
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds()), "p50-ns")
	for _, r := range warm {
		_ = t.Release(ctx, r.ID)
	}
}
