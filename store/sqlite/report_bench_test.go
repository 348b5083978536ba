package sqlite

import (
	"context"
	"testing"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
	"github.com/tokenbudget/tokenbudget/store/storetest"
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
//	go test -run '^$' -bench Report -benchtime 5x -count 5 ./store/sqlite/
func BenchmarkReport(b *testing.B) {
	ctx := context.Background()
	db := openInternal(b, "report.db")
	if err := db.Update(ctx, func(t budget.Tx) error {
		x := t.(*tx).tx
		if _, err := x.ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?)
			INSERT INTO usage (key, request_id, provider, model, model_norm, input, output, reasoning, cache_read, at, cost, end_user)
			SELECT 'key-' || (i % ?), 'req-' || i, 'openai', CASE i / 1000 % 2 WHEN 0 THEN 'gpt-4o' ELSE 'gpt-4o-mini' END,
				CASE i / 1000 % 2 WHEN 0 THEN 'gpt-4o' ELSE 'gpt-4o-mini' END, 100 + i % 900, 10 + i % 300, i % 7, i % 50, ? + i * ?,
				(100 + i % 900) * 3, CASE i / 2000 % 3 WHEN 0 THEN '' ELSE 'user-' || (i % 1000 % 40) || '-' || (i / 2000 % 3) END FROM n`,
			storetest.ReportEvents, storetest.ReportKeys, storetest.ReportStart.UnixNano(), storetest.ReportStep); err != nil {
			return err
		}
		_, err := x.ExecContext(ctx, `INSERT INTO rollups (`+sqlrow.RollupCols+`)
			SELECT `+dayOf("at")+`, key, team, org, end_user, provider, model, tags, MAX(model_norm), `+rollupSums+`
			FROM usage GROUP BY 1, key, team, org, end_user, provider, model, tags`)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	storetest.BenchReport(b, db)
}
