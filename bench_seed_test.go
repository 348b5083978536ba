package tokenbudget_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
)

var seedDay = time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)

// seedHistory builds, once per test binary, a database holding 1,000,000
// usage rows: 1,000 keys with 1,000 rows each, all in one day, and a daily
// limit per key that has no counter row yet (every window is cold).
func seedHistory(dir string) (seedPath string, seedErr error) {
	func() {
		seedPath = filepath.Join(dir, "history.db")
		ctx := context.Background()
		db, err := tokenbudget.Open(ctx, seedPath, tokenbudget.Options{Create: true})
		if err != nil {
			seedErr = err
			return
		}
		db.Close(ctx)
		raw, err := sql.Open("sqlite", "file:"+seedPath)
		if err != nil {
			seedErr = err
			return
		}
		defer raw.Close()
		start := seedDay.UnixNano()
		step := int64(24*time.Hour) / 1000
		_, seedErr = raw.Exec(fmt.Sprintf(`
			WITH RECURSIVE c(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM c WHERE x < 999999)
			INSERT INTO usage (key, request_id, provider, model, input, output, reasoning, cache_read, cache_write, at)
			SELECT 'key-' || (x / 1000), 'r' || x, 'openai', 'gpt-4o', 100, 20, 0, 0, 0, %d + (x %% 1000) * %d FROM c`, start, step))
		if seedErr != nil {
			return
		}
		_, seedErr = raw.Exec(fmt.Sprintf(`
			WITH RECURSIVE c(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM c WHERE x < 999)
			INSERT INTO limits (id, key, scope, scope_value, metric, max, window, window_seconds, reset_time, timezone, enabled, created_at, updated_at)
			SELECT 'lim-' || x, 'key-' || x, 'global', '', 'tokens', %d, 'daily', 0, 0, 'UTC', 1, 0, 0 FROM c`, int64(1)<<50))
		if seedErr == nil {
			// As a long-running gateway's database would be: checkpointed.
			_, seedErr = raw.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`)
		}
	}()
	return seedPath, seedErr
}

// BenchmarkSeedColdWindow is one check of a key whose daily window has no
// counter row, on a database opened just before: the window's usage is
// summed from about 1,000 of the history's 1,000,000 rows.
//
// "open" times the whole first check of a freshly opened database (it
// also opens a read connection and parses the schema); "seed" first checks
// another key on the new connection, then times the check of a key whose
// rows that connection has never read.
func BenchmarkSeedColdWindow(b *testing.B) {
	path, err := seedHistory(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	for _, warm := range []bool{false, true} {
		name := "open"
		if warm {
			name = "seed"
		}
		b.Run(name, func(b *testing.B) { benchSeed(b, path, warm) })
	}
}

func benchSeed(b *testing.B, path string, warmConn bool) {
	ctx := context.Background()
	at := seedDay.Add(23 * time.Hour)
	cfg := budget.DefaultConfig()
	cfg.SweepInterval = -1
	cfg.RefreshInterval = time.Hour
	i := 0
	for b.Loop() {
		b.StopTimer()
		db, err := tokenbudget.Open(ctx, path, tokenbudget.Options{Config: &cfg})
		if err != nil {
			b.Fatal(err)
		}
		key := fmt.Sprintf("key-%d", i%1000)
		i++
		if warmConn {
			if _, err := db.CheckAt(ctx, budget.Request{Key: fmt.Sprintf("key-%d", (i+500)%1000)}, at); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		d, err := db.CheckAt(ctx, budget.Request{Key: key}, at)
		b.StopTimer()
		if err != nil || len(d.Limits) != 1 || d.Limits[0].Used != 1000*120 {
			b.Fatalf("cold check of %s = %+v, %v; want used %d", key, d.Limits, err, 1000*120)
		}
		db.Close(ctx)
		b.StartTimer()
	}
}
