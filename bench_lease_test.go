package tokenbudget_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// The same pairs as BenchmarkReserveCommit1 and 64 with budget leases on
// (Config.Leases, the journal beside the database): most reservations are
// carved from a per-key lease in memory, and commits reach the store in
// the writer's batches.
//
//	go test -run '^$' -bench 'ReserveCommit(1|64)' -count 6 .
func BenchmarkReserveCommit1Leases(b *testing.B) { benchLeasedPairs(b, 1) }

func BenchmarkReserveCommit64Leases(b *testing.B) { benchLeasedPairs(b, 64) }

func benchLeasedPairs(b *testing.B, goroutines int) {
	t := openBench(b, pairKeys, func(c *budget.Config) { c.Leases = true }).Tracker
	warmPairs(b, t)
	runPairs(b, t, goroutines)
	b.StopTimer()
	st := t.Stats()
	b.ReportMetric(float64(st.Leased)/float64(b.N+pairKeys), "leased/pair")
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
	if st := t.Stats(); st.Leased < int64(b.N) {
		b.Fatalf("%d of %d reservations came from the lease", st.Leased, b.N)
	}
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds()), "p50-ns")
	for _, r := range warm {
		_ = t.Release(ctx, r.ID)
	}
}
