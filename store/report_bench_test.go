package store

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// BenchmarkReport is issue 16's report target: a month of a 1,000,000-event
// history (1,000 keys, 30 days; each key calls two models for three end
// users, its own and two shared with 24 other keys, about 180,000 rollup
// rows) grouped by key and day, from the daily
// rollups (Tracker.Report over whole days) against summing the events
// themselves in the same run (EventTotals over the same month, grouped the
// same way). The history is written by SQL, then its rollups built by the
// statement schema 9's migration uses.
//
//	go test -run '^$' -bench Report -benchtime 5x -count 5 ./store/
func BenchmarkReport(b *testing.B) {
	ctx := context.Background()
	schema, err := os.ReadFile("../schema.sql") // the root package embeds it; it imports this one
	if err != nil {
		b.Fatal(err)
	}
	db, err := Open(ctx, filepath.Join(b.TempDir(), "report.db"), string(schema), Options{Create: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	const (
		keys   = 1000
		days   = 30
		events = 1_000_000
	)
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	step := int64(days) * int64(24*time.Hour) / events // events spread evenly over the month
	if err := db.Update(ctx, func(t budget.Tx) error {
		x := t.(*tx).tx
		if _, err := x.ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?)
			INSERT INTO usage (key, request_id, provider, model, model_norm, input, output, reasoning, cache_read, at, cost, end_user)
			SELECT 'key-' || (i % ?), 'req-' || i, 'openai', CASE i / 1000 % 2 WHEN 0 THEN 'gpt-4o' ELSE 'gpt-4o-mini' END,
				CASE i / 1000 % 2 WHEN 0 THEN 'gpt-4o' ELSE 'gpt-4o-mini' END, 100 + i % 900, 10 + i % 300, i % 7, i % 50, ? + i * ?,
				(100 + i % 900) * 3, CASE i / 2000 % 3 WHEN 0 THEN '' ELSE 'user-' || (i % 1000 % 40) || '-' || (i / 2000 % 3) END FROM n`,
			events, keys, start.UnixNano(), step); err != nil {
			return err
		}
		_, err := x.ExecContext(ctx, `INSERT INTO rollups (`+sqlrow.RollupCols+`)
			SELECT `+dayOf("at")+`, key, team, org, end_user, provider, model, MAX(model_norm), `+rollupSums+`
			FROM usage GROUP BY 1, key, team, org, end_user, provider, model`)
		return err
	}); err != nil {
		b.Fatal(err)
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
	if err := db.View(ctx, func(t budget.Tx) error {
		return t.(*tx).get(ctx, &nRollups, `SELECT COUNT(*) FROM rollups`)
	}); err != nil {
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
