package postgres_test

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/postgres"
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

// BenchmarkReport is issue 16's report target on PostgreSQL, the shape of
// store's BenchmarkReport on SQLite: a month of a 1,000,000-event history
// (1,000 keys, 30 days; each key calls two models for three end users,
// its own and two shared with 24 other keys) grouped by key and day, from
// the daily rollups (Tracker.Report over whole days) against summing the
// events themselves in the same run (EventTotals over the same month,
// grouped the same way). The history is written by SQL into a schema-8
// database; opening it runs schema 9's migration, which builds the
// rollups; then the tables are analysed, as autovacuum would.
//
//	go test -run '^$' -bench Report -benchtime 5x -count 5 ./store/postgres/
func BenchmarkReport(b *testing.B) {
	ctx := context.Background()
	const (
		keys   = 1000
		days   = 30
		events = 1_000_000
	)
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	step := int64(days) * int64(24*time.Hour) / events // events spread evenly over the month
	dsn := schemaAt(b, 8, `INSERT INTO usage (key, request_id, provider, model, model_norm, input, output, reasoning, cache_read, at, cost, end_user)
		SELECT 'key-' || (i % `+itoa(keys)+`), 'req-' || i, 'openai', CASE i / 1000 % 2 WHEN 0 THEN 'gpt-4o' ELSE 'gpt-4o-mini' END,
			CASE i / 1000 % 2 WHEN 0 THEN 'gpt-4o' ELSE 'gpt-4o-mini' END, 100 + i % 900, 10 + i % 300, i % 7, i % 50, `+itoa(start.UnixNano())+` + i * `+itoa(step)+`,
			(100 + i % 900) * 3, CASE i / 2000 % 3 WHEN 0 THEN '' ELSE 'user-' || (i % 1000 % 40) || '-' || (i / 2000 % 3) END
		FROM generate_series(0, `+itoa(events-1)+`) AS i`)
	db, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	raw := rawDB(b, dsn)
	for _, table := range []string{"usage", "rollups"} {
		if _, err := raw.ExecContext(ctx, `ANALYZE `+table); err != nil {
			b.Fatal(err)
		}
	}
	cfg := budget.DefaultConfig()
	cfg.SweepInterval = -1
	tr, err := budget.New(ctx, db, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close(ctx)
	q := budget.ReportQuery{Since: start, Until: start.AddDate(0, 0, days), By: []budget.Dim{budget.DimKey, budget.DimDay}}
	fromEvents := func() []budget.ReportRow {
		var rows []budget.ReportRow
		if err := db.View(ctx, func(t budget.Tx) error {
			rs, err := t.EventTotals(ctx, q.Since, q.Until, "", q.By)
			rows = budget.Group(rs, q.By)
			return err
		}); err != nil {
			b.Fatal(err)
		}
		return rows
	}
	rolled, err := tr.Report(ctx, q)
	if err != nil {
		b.Fatal(err)
	}
	if want := fromEvents(); len(rolled) != keys*days || !reflect.DeepEqual(rolled, want) {
		b.Fatalf("the report has %d rows (want %d) and matches the events: %v", len(rolled), keys*days, reflect.DeepEqual(rolled, want))
	}
	var nRollups int64
	if err := raw.GetContext(ctx, &nRollups, `SELECT COUNT(*) FROM rollups`); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d events in %d rollup rows", events, nRollups)
	b.Run("rollups", func(b *testing.B) {
		for b.Loop() {
			if _, err := tr.Report(ctx, q); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("events", func(b *testing.B) {
		for b.Loop() {
			fromEvents()
		}
	})
}
