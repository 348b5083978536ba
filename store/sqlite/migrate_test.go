package sqlite_test

import (
	"context"
	"database/sql"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
)

// A database written before model normalisation (schema 2): raw model
// names, a limit on one spelling, its counter counting that spelling only.
// Opening it migrates (to the newest schema): the events get their
// normalised model, the limit value is normalised, its counter recounted,
// and verify is clean.
func TestMigrateNormalisesModels(t *testing.T) {
	ctx := context.Background()
	path := tmpDB(t)
	v1, err := os.ReadFile("testdata/schema_v1.sql") // the schema as the first release wrote it
	if err != nil {
		t.Fatal(err)
	}
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	day := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	for _, q := range []string{
		string(v1),
		`ALTER TABLE reservations ADD COLUMN on_expiry TEXT NOT NULL DEFAULT 'release' CHECK (on_expiry IN ('release', 'charge'))`,
		`INSERT INTO limits (id, key, scope, scope_value, metric, max, window, window_seconds, reset_time, timezone, enabled, created_at, updated_at)
			VALUES ('m', 'k', 'model', 'GPT-4o', 'tokens', 1000000, 'daily', 0, 0, 'UTC', 1, 1, 1)`,
		`INSERT INTO usage (key, request_id, provider, model, input, at) VALUES
			('k', 'a', 'openai', 'GPT-4o', 10, ` + itoa(day.Add(time.Hour).UnixNano()) + `),
			('k', 'b', 'openai', 'gpt-4o-2024-08-06', 20, ` + itoa(day.Add(2*time.Hour).UnixNano()) + `),
			('k', 'c', 'openai', 'openai/gpt-4o', 30, ` + itoa(day.Add(3*time.Hour).UnixNano()) + `),
			('k', 'd', 'openai', 'gpt-4o-mini', 40, ` + itoa(day.Add(4*time.Hour).UnixNano()) + `)`,
		`INSERT INTO counters (limit_id, window_start, window_end, used) VALUES ('m', ` + itoa(day.UnixNano()) + `, ` + itoa(day.Add(24*time.Hour).UnixNano()) + `, 10)`,
		`PRAGMA user_version = 2`,
	} {
		if _, err := raw.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	raw.Close()

	s := openStore(t, path)
	defer s.Close()
	tr := newTracker(t, s, nil)
	defer tr.Close(ctx)
	ls, err := tr.Limits(ctx, "k")
	if err != nil || len(ls) != 1 || ls[0].ScopeValue != "gpt-4o" {
		t.Fatalf("limits after migration = %+v, %v; want one on gpt-4o", ls, err)
	}
	d, err := tr.CheckAt(ctx, budget.Request{Key: "k", Model: "gpt-4o"}, day.Add(5*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Limits) != 1 || d.Limits[0].Used != 60 {
		t.Fatalf("after migration gpt-4o used %+v; want 60 (three spellings, not mini)", d.Limits)
	}
	if drift, err := tr.Verify(ctx); err != nil || len(drift) != 0 {
		t.Fatalf("Verify after migration = %+v, %v; want clean", drift, err)
	}
	rep, err := tr.CheckStorage(ctx, true)
	if err != nil || len(rep.Problems) != 0 {
		t.Fatalf("CheckStorage after migration = %+v, %v", rep, err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// A database written before holds were keyed by window (schema 2 here, so
// every later step runs): a live reservation holding on a limit and a lease
// on a concurrent one. After migrating, its holds still count, a commit
// settles it and frees them, and verify is clean.
func TestMigrateKeepsLiveReservations(t *testing.T) {
	ctx := context.Background()
	path := tmpDB(t)
	v1, err := os.ReadFile("testdata/schema_v1.sql")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	day := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	at := day.Add(time.Hour)
	exp := at.Add(time.Hour)
	for _, q := range []string{
		string(v1),
		`ALTER TABLE reservations ADD COLUMN on_expiry TEXT NOT NULL DEFAULT 'release' CHECK (on_expiry IN ('release', 'charge'))`,
		`INSERT INTO limits (id, key, scope, scope_value, metric, max, window, window_seconds, reset_time, timezone, enabled, created_at, updated_at) VALUES
			('t', 'k', 'global', '', 'tokens', 1000, 'daily', 0, 0, 'UTC', 1, 1, 1),
			('c', 'k', 'global', '', 'concurrent', 5, '', 0, 0, '', 1, 1, 1)`,
		`INSERT INTO reservations (id, key, est_tokens, at, expires_at, state, on_expiry) VALUES ('rsv_old', 'k', 300, ` + itoa(at.UnixNano()) + `, ` + itoa(exp.UnixNano()) + `, 'live', 'release')`,
		// A counter and the event it sums: the rebuild of limits (schema
		// 8) must keep the rows that reference it.
		`INSERT INTO usage (key, request_id, provider, model, input, at) VALUES ('k', 'old1', 'p', 'm', 50, ` + itoa(day.UnixNano()) + `)`,
		`INSERT INTO counters (limit_id, window_start, window_end, used) VALUES ('t', ` + itoa(day.UnixNano()) + `, ` + itoa(day.Add(24*time.Hour).UnixNano()) + `, 50)`,
		`INSERT INTO holds (reservation_id, limit_id, window_start, amount, expires_at) VALUES
			('rsv_old', 't', ` + itoa(day.UnixNano()) + `, 300, ` + itoa(exp.UnixNano()) + `),
			('rsv_old', 'c', 0, 1, ` + itoa(exp.UnixNano()) + `)`,
		`PRAGMA user_version = 2`,
	} {
		if _, err := raw.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	raw.Close()

	s := openStore(t, path)
	defer s.Close()
	tr := newTracker(t, s, func(c *budget.Config) { c.Now = func() time.Time { return at.Add(time.Minute) } })
	defer tr.Close(ctx)
	used := func() (tokens, reserved, leases int64) {
		t.Helper()
		d, err := tr.CheckAt(ctx, budget.Request{Key: "k"}, at.Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range d.Limits {
			switch st.Limit.Metric {
			case budget.MetricTokens:
				tokens, reserved = st.Used, st.Reserved
			case budget.MetricConcurrent:
				leases = st.Used
			}
		}
		return
	}
	if tok, res, n := used(); tok != 50 || res != 300 || n != 1 {
		t.Fatalf("after migration: used %d, reserved %d, leases %d; want 50, 300, 1", tok, res, n)
	}
	if _, err := tr.Commit(ctx, "rsv_old", budget.Usage{Input: 120}); err != nil {
		t.Fatalf("commit of a migrated reservation: %v", err)
	}
	tr.InvalidateLimits("")
	if tok, res, n := used(); tok != 170 || res != 0 || n != 0 {
		t.Fatalf("after commit: used %d, reserved %d, leases %d; want 170, 0, 0", tok, res, n)
	}
	// The rebuilt limits still cascade into what references them.
	if err := tr.DeleteLimit(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := s.View(ctx, func(x budget.Tx) error {
		rows, err := x.(budget.HistoryTx).CounterRows(ctx)
		left = len(rows)
		return err
	}); err != nil || left != 0 {
		t.Fatalf("counters left after deleting their limit: %d, %v; want 0", left, err)
	}
	if drift, err := tr.Verify(ctx); err != nil || len(drift) != 0 {
		t.Fatalf("Verify after migration = %+v, %v; want clean", drift, err)
	}
}

// A schema-10 database (alerts without a kind) migrates to one whose
// alerts are threshold crossings.
func TestMigrate10KeepsAlertsAsThresholds(t *testing.T) {
	ctx := context.Background()
	path := olderDB(t,
		`ALTER TABLE alerts DROP COLUMN kind`,
		`ALTER TABLE alerts DROP COLUMN metric`,
		`INSERT INTO limits (id, key, scope, scope_value, metric, max, window, window_seconds, reset_time, timezone, enabled, created_at, updated_at) VALUES ('lim', 'k', 'global', '', 'usd', 100, 'daily', 0, 0, 'UTC', 1, 1, 1)`,
		`INSERT INTO alerts (id, limit_id, level, owner, window_start, threshold, used, max, at) VALUES ('alt_1', 'lim', 'key', 'k', 0, 50, 50, 100, 1)`,
		`PRAGMA user_version = 10`,
	)
	s := openStore(t, path)
	defer s.Close()
	tr := newTracker(t, s, nil)
	defer tr.Close(ctx)
	as, err := tr.Alerts(ctx, 10)
	if err != nil || len(as) != 1 || as[0].Kind != budget.AlertThreshold || as[0].Threshold != 50 || as[0].Metric != budget.MetricUSD {
		t.Fatalf("alerts after migration = %+v, %v; want the 50 %% one as a threshold of its usd limit", as, err)
	}
}

// A database of schema 12 (gateway keys without expiry or models, no
// admin tokens, no audit log) keeps its keys when opened: they never
// expire and allow any model, and the new tables take tokens and entries.
func TestMigrate12AddsKeyRulesAndAudit(t *testing.T) {
	ctx := context.Background()
	path := olderDB(t,
		`DROP TABLE audit`,
		`DROP TABLE admin_tokens`,
		`ALTER TABLE gateway_keys DROP COLUMN expires_at`,
		`ALTER TABLE gateway_keys DROP COLUMN models`,
		`INSERT INTO gateway_keys (name, hash, created_at) VALUES ('app', 'h', 1)`,
		`PRAGMA user_version = 12`,
	)
	s := openStore(t, path)
	defer s.Close()
	k, err := s.KeyByHash(ctx, "h")
	if err != nil || k.Name != "app" || !k.ExpiresAt.IsZero() || len(k.Models) != 0 {
		t.Fatalf("key after migration = %+v, %v; want app, no expiry, any model", k, err)
	}
	if err := s.InsertAdminToken(ctx, gatekey.AdminToken{Name: "ops", Hash: "ah", CreatedAt: time.Unix(1, 0)}); err != nil {
		t.Fatal(err)
	}
	tr := newTracker(t, s, nil)
	defer tr.Close(ctx)
	es, err := tr.Audit(ctx, budget.AuditFilter{})
	if err != nil || len(es) != 1 || es[0].Object != budget.ObjectAdminToken {
		t.Fatalf("audit after migration = %+v, %v; want the token's entry", es, err)
	}
}

// A database of schema 13 (prices without a 1-hour cache-write price) keeps
// its price versions when opened: each prices a 1-hour cache write at its
// cache-write price, so an event's cost is what it was, and a new version
// takes a 1-hour price of its own.
func TestMigrate13PricesCacheWrite1hAtCacheWrite(t *testing.T) {
	ctx := context.Background()
	path := olderDB(t,
		`ALTER TABLE prices DROP COLUMN cache_write_1h`,
		`INSERT INTO prices (provider, model, tier, above_input, from_at, input, output, cache_read, cache_write, reasoning)
			VALUES ('anthropic', 'claude', '', 0, 1, 3000000, 15000000, 300000, 3750000, 15000000)`,
		`PRAGMA user_version = 13`,
	)
	s := openStore(t, path)
	defer s.Close()
	tr := newTracker(t, s, nil)
	defer tr.Close(ctx)
	ps, err := tr.ListPrices(ctx)
	if err != nil || len(ps) != 1 || ps[0].CacheWrite != 3_750_000 || ps[0].CacheWrite1h != 3_750_000 {
		t.Fatalf("prices after migration = %+v, %v; want claude's 1-hour price at its cache-write price $3.75", ps, err)
	}
	oneHour := "6"
	if _, err := tr.SetPrices(ctx, budget.PriceSpec{Provider: "anthropic", Model: "claude", From: time.Unix(2, 0), Input: "3", Output: "15", CacheWrite1h: &oneHour}); err != nil {
		t.Fatal(err)
	}
	if ps, err = tr.ListPrices(ctx); err != nil || len(ps) != 2 || ps[1].CacheWrite1h != 6_000_000 {
		t.Fatalf("prices = %+v, %v; want the new version's 1-hour price $6", ps, err)
	}
}

// olderDB is a database of the newest schema taken back by stmts (which
// set its user_version) to what an older build wrote, closed, for a test
// to open and migrate.
func olderDB(t *testing.T, stmts ...string) string {
	t.Helper()
	path := tmpDB(t)
	openStore(t, path).Close()
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, q := range stmts {
		if _, err := raw.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return path
}

// A database of schema 14 (limits that cannot have scope tag, rollups and
// events without tags) keeps its limits, raises, counters and rollups
// when opened, and then takes a tag limit that counts tagged events.
func TestMigrate14KeepsLimitsAndTakesTagLimits(t *testing.T) {
	ctx := context.Background()
	path := olderDB(t,
		`INSERT INTO limits (id, key, scope, metric, max, window, window_seconds, created_at, updated_at)
			VALUES ('lim_old', 'k', 'global', 'tokens', 100, '1h', 3600, 1, 1)`,
		`INSERT INTO raises (id, limit_id, amount, until, created_at) VALUES ('rse_old', 'lim_old', 50, 0, 1)`,
		`INSERT INTO usage (key, request_id, provider, model, input, at) VALUES ('k', 'r1', 'openai', 'gpt', 7, 3600000000000)`,
		`INSERT INTO counters (limit_id, subject, window_start, window_end, used) VALUES ('lim_old', '', 3600000000000, 7200000000000, 7)`,
		`INSERT INTO rollups (day, key, provider, model, requests, input) VALUES (0, 'k', 'openai', 'gpt', 1, 7)`,
		`ALTER TABLE usage DROP COLUMN tags`,
		`ALTER TABLE reservations DROP COLUMN tags`,
		`PRAGMA user_version = 14`,
	)
	s := openStore(t, path)
	defer s.Close()
	err := s.View(ctx, func(tx budget.Tx) error {
		l, err := tx.Limit(ctx, "lim_old")
		if err != nil || l.Max != 100 || len(l.Raises) != 1 || l.Raises[0].Amount != 50 {
			t.Errorf("limit after migration = %+v, %v; want lim_old with its raise of 50", l, err)
		}
		rows, err := tx.(budget.HistoryTx).CounterRows(ctx)
		if err != nil || len(rows) != 1 || rows[0].Used != 7 {
			t.Errorf("counters after migration = %+v, %v; want lim_old's 7", rows, err)
		}
		rs, err := tx.(budget.HistoryTx).Rollups(ctx, time.Unix(0, 0), time.Unix(86400, 0), "", budget.AllDims)
		if err != nil || len(rs) != 1 || rs[0].Input != 7 || rs[0].Tags != "" {
			t.Errorf("rollups after migration = %+v, %v; want the day's 7 input tokens, untagged", rs, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tr := newTracker(t, s, nil)
	defer tr.Close(ctx)
	max := int64(10)
	l, _, err := tr.SetLimit(ctx, budget.LimitSpec{Key: "k", Scope: "tag", ScopeValue: "project=atlas", Window: "1h", Max: &max})
	if err != nil {
		t.Fatalf("set a tag limit after migration: %v", err)
	}
	if _, err := tr.RecordSync(ctx, budget.Usage{Key: "k", Input: 4, Tags: "project=atlas"}, budget.Usage{Key: "k", Input: 5, Tags: "project=other"}); err != nil {
		t.Fatal(err)
	}
	d, err := tr.Check(ctx, budget.Request{Key: "k", Tags: "project=atlas"})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Limits) != 2 || d.Limits[1].Limit.ID != l.ID || d.Limits[1].Used != 4 || d.Limits[0].Used != 9 {
		t.Errorf("statuses = %+v; want lim_old used 9 and the tag limit used 4 (the atlas event only)", d.Limits)
	}
}
