package postgres_test

import (
	"context"
	"path/filepath"
	"testing"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/storetest"
)

// The benchmarks run storetest's shapes (the root package's benchmarks)
// on both backends through the same tokenbudget.Open, side by side:
// BenchmarkX/sqlite and BenchmarkX/postgres (skipped without
// BUDGET_TEST_POSTGRES).

// backends open a fresh database of each backend for one benchmark.
var backends = []struct {
	name string
	dsn  func(b *testing.B) string
}{
	{"sqlite", func(b *testing.B) string { return filepath.Join(b.TempDir(), "bench.db") }},
	{"postgres", func(b *testing.B) string { return freshSchema(b) }},
}

func eachBackend(b *testing.B, bench func(*testing.B, storetest.BenchTracker)) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			bench(b, func(b *testing.B, cfg budget.Config) *budget.Tracker {
				ctx := context.Background()
				db, err := tokenbudget.Open(ctx, be.dsn(b), tokenbudget.Options{Create: true, Config: &cfg})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { db.Close(ctx) })
				return db.Tracker
			})
		})
	}
}

func BenchmarkCheckWarm(b *testing.B)       { eachBackend(b, storetest.BenchCheckWarm) }
func BenchmarkCheckCold(b *testing.B)       { eachBackend(b, storetest.BenchCheckCold) }
func BenchmarkCheckColdSeed(b *testing.B)   { eachBackend(b, storetest.BenchCheckColdSeed) }
func BenchmarkRecordSustained(b *testing.B) { eachBackend(b, storetest.BenchRecordSustained) }

// BenchmarkReserveCommit1 and BenchmarkReserveCommit64: Reserve then
// Commit over 1,000 keys with 3 limits each, from 1 and 64 goroutines.
func BenchmarkReserveCommit1(b *testing.B) {
	eachBackend(b, func(b *testing.B, open storetest.BenchTracker) { storetest.BenchReserveCommit(b, open, 1) })
}

func BenchmarkReserveCommit64(b *testing.B) {
	eachBackend(b, func(b *testing.B, open storetest.BenchTracker) { storetest.BenchReserveCommit(b, open, 64) })
}
