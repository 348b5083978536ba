package postgres_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/postgres"
	"github.com/tokenbudget/tokenbudget/store/storetest"
)

// schemaAt makes a fresh schema at version v, as this repository's first v
// migration scripts leave it, runs seed in it and returns its DSN.
func schemaAt(t testing.TB, v int, seed ...string) string {
	t.Helper()
	dsn := freshSchema(t)
	names, err := filepath.Glob("migrations/*.sql")
	if err != nil || len(names) < v {
		t.Fatalf("migration scripts %v, %v; want at least %d", names, err, v)
	}
	raw := rawDB(t, dsn)
	var stmts []string
	for _, n := range names[:v] { // Glob sorts
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		stmts = append(stmts, string(b))
	}
	stmts = append(stmts, `CREATE TABLE schema_version (version INTEGER NOT NULL)`,
		`INSERT INTO schema_version (version) VALUES (`+strconv.Itoa(v)+`)`)
	for _, q := range append(stmts, seed...) {
		if _, err := raw.Exec(q); err != nil {
			t.Fatalf("%.200s: %v", q, err)
		}
	}
	return dsn
}

// rawDB is a pool of one session on dsn (its search_path is the
// schema's), for SQL of the test's own, closed by t.Cleanup.
func rawDB(t testing.TB, dsn string) *sqlx.DB {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	raw := sqlx.NewDb(stdlib.OpenDB(*cfg), "pgx")
	raw.SetMaxOpenConns(1)
	t.Cleanup(func() { raw.Close() })
	return raw
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// A schema-7 database with key limits, a default limit, a counter, a
// live reservation holding on a window and a lease, and a history
// reaching back before 1970 with an unpriced event and a late commit's
// excess. Opening it migrates to the newest schema: the reservation's
// holds still count and its commit frees them, the history and counter
// carry over, a team limit of the default's shape can be created beside
// it (the identity gained its owner), the daily rollups are built from
// the history (days floored before 1970 too, the excess no request, the
// unpriced event without a price), limits take alert thresholds, and
// verify is clean.
func TestMigrate7ToNewestKeepsLimitsReservationsAndHistory(t *testing.T) {
	ctx := context.Background()
	day := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	at := day.Add(9 * time.Hour)
	exp := at.Add(time.Hour)
	nsDay := int64(24 * time.Hour)
	dsn := schemaAt(t, 7,
		`INSERT INTO limits (id, key, scope, scope_value, metric, max, "window", window_seconds, reset_time, timezone, enabled, created_at, updated_at) VALUES
			('t', 'k', 'global', '', 'tokens', 1000, 'daily', 0, 0, 'UTC', true, 1, 1),
			('c', 'k', 'global', '', 'concurrent', 5, '', 0, 0, '', true, 1, 1),
			('d', '', 'global', '', 'tokens', 5000, 'daily', 0, 0, 'UTC', true, 1, 1)`,
		`INSERT INTO usage (key, request_id, provider, model, model_norm, input, at) VALUES ('k', 'e0', 'p', 'm', 'm', 50, `+itoa(day.Add(time.Hour).UnixNano())+`),
			('k', 'old1', 'p', 'm', 'm', 5, -1), ('k', 'old2', 'p', 'm', 'm', 7, `+itoa(-nsDay)+`),
			('k', 'old3', 'p', 'm', 'm', 11, `+itoa(-nsDay-1)+`)`,
		`INSERT INTO usage (key, request_id, provider, model, model_norm, input, at, unpriced) VALUES
			('k', 'u1', 'p', 'm', 'm', 20, `+itoa(day.Add(-21*time.Hour).UnixNano())+`, true),
			('k', 'u1:late', 'p', 'm', 'm', 4, `+itoa(day.Add(-20*time.Hour).UnixNano())+`, false)`,
		`INSERT INTO counters (limit_id, subject, window_start, window_end, used) VALUES ('t', '', `+itoa(day.UnixNano())+`, `+itoa(day.Add(24*time.Hour).UnixNano())+`, 50)`,
		`INSERT INTO reservations (id, key, est_tokens, at, expires_at, state, on_expiry, holds) VALUES ('rsv_old', 'k', 300, `+
			itoa(at.UnixNano())+`, `+itoa(exp.UnixNano())+`, 'live', 'release', E'c\t\t0\t1\tR\nt\t\t`+itoa(day.UnixNano())+`\t300\tR')`,
		`INSERT INTO holds (limit_id, subject, window_start, reservation_id, amount, expires_at) VALUES
			('t', '', `+itoa(day.UnixNano())+`, 'rsv_old', 300, `+itoa(exp.UnixNano())+`),
			('c', '', 0, 'rsv_old', 1, `+itoa(exp.UnixNano())+`)`,
	)
	db, err := postgres.Open(ctx, dsn, postgres.Options{MaxConns: 4})
	if err != nil {
		t.Fatalf("Open(schema 7): %v", err)
	}
	defer db.Close()
	c := storetest.NewClock(at.Add(time.Minute))
	tr := storetest.NewTracker(t, db, c, time.Second)
	used := func() (tokens, reserved, leases int64) {
		t.Helper()
		d, err := tr.CheckAt(ctx, budget.Request{Key: "k"}, c.Now())
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range d.Limits {
			switch st.Limit.ID {
			case "t":
				tokens, reserved = st.Used, st.Reserved
			case "c":
				leases = st.Used
			}
		}
		return
	}
	if tok, res, n := used(); tok != 50 || res != 300 || n != 1 {
		t.Fatalf("after migration: used %d, reserved %d, leases %d; want 50, 300, 1", tok, res, n)
	}
	rows, err := tr.Report(ctx, budget.ReportQuery{Since: time.Unix(0, -2*nsDay), Until: day.AddDate(0, 0, 1), By: []budget.Dim{budget.DimDay}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%s: %d requests, %d input, %d unpriced", r.Values[0], r.Requests, r.Input, r.NoPrice))
	}
	want := []string{"1969-12-30: 1 requests, 11 input, 0 unpriced", "1969-12-31: 2 requests, 12 input, 0 unpriced",
		"2026-03-01: 1 requests, 24 input, 1 unpriced", "2026-03-02: 1 requests, 50 input, 0 unpriced"}
	if !slices.Equal(got, want) {
		t.Fatalf("report by day after migration = %q; want %q", got, want)
	}
	if drift, err := tr.VerifyRollups(ctx); err != nil || len(drift) != 0 {
		t.Fatalf("VerifyRollups after migration = %+v, %v; want clean", drift, err)
	}
	noPrice := map[string]bool{}
	if _, err := tr.Export(ctx, day.AddDate(0, 0, -1), day, "k", func(u budget.Usage) error {
		noPrice[u.RequestID] = u.NoPrice || !u.CostKnown
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(noPrice) != 2 || !noPrice["u1"] || noPrice["u1:late"] {
		t.Fatalf("exported events without a price = %v; want u1 (unpriced) only", noPrice)
	}
	if h, err := tr.PrunedBefore(ctx); err != nil || !h.IsZero() {
		t.Fatalf("PrunedBefore after migration = %v, %v; want nothing pruned", h, err)
	}
	ls, err := tr.Limits(ctx, "")
	if err != nil || len(ls) != 3 {
		t.Fatalf("limits after migration = %+v, %v; want t, c and d", ls, err)
	}
	for _, l := range ls {
		if l.Team != "" || l.Org != "" || len(l.Raises) != 0 {
			t.Fatalf("limit %s after migration = %+v; want no team, org or raises", l.ID, l)
		}
	}
	if _, err := tr.Commit(ctx, "rsv_old", budget.Usage{Input: 120}); err != nil {
		t.Fatalf("commit of a migrated reservation: %v", err)
	}
	if tok, res, n := used(); tok != 170 || res != 0 || n != 0 {
		t.Fatalf("after commit: used %d, reserved %d, leases %d; want 170, 0, 0", tok, res, n)
	}
	if _, err := tr.SetTeam(ctx, "eng", "acme"); err != nil {
		t.Fatal(err)
	}
	if err := tr.SetKeyTeam(ctx, "k", "eng"); err != nil {
		t.Fatal(err)
	}
	team := storetest.SetLimit(t, tr, budget.LimitSpec{Team: "eng", Window: "daily"}, 5000)
	each := storetest.SetLimit(t, tr, budget.LimitSpec{Key: "k", Scope: "user", ScopeValue: "*", Window: "once", Alerts: &[]int{25}}, 100)
	ls, err = tr.Limits(ctx, "k")
	if i := slices.IndexFunc(ls, func(l budget.Limit) bool { return l.ID == each.ID }); err != nil || i < 0 || !slices.Equal(ls[i].Alerts, []int{25}) {
		t.Fatalf("limits of k = %+v, %v; want %s with alerts at 25%%", ls, err, each.ID)
	}
	storetest.RecordSync(t, tr, budget.Usage{Key: "k", RequestID: "e1", User: "alice", Input: 30, At: c.Now()})
	if u, _ := storetest.Used(t, tr, budget.Request{Key: "k"}, c.Now(), team.ID); u != 30 {
		t.Fatalf("team eng used %d; want 30 (the event after k joined; k's earlier spending stays with k)", u)
	}
	if u, _ := storetest.Used(t, tr, budget.Request{Key: "k", User: "alice"}, c.Now(), each.ID); u != 30 {
		t.Fatalf("alice's once counter used %d; want 30", u)
	}
	if drift, err := tr.Verify(ctx); err != nil || len(drift) != 0 {
		t.Fatalf("Verify after migration = %+v, %v; want clean", drift, err)
	}
	if drift, err := tr.VerifyRollups(ctx); err != nil || len(drift) != 0 {
		t.Fatalf("VerifyRollups after the writes = %+v, %v; want clean", drift, err)
	}
	// The events before 1970 can go: their rollups keep the report.
	if res, err := tr.Prune(ctx, day.AddDate(0, 0, -1)); err != nil || res.Deleted != 3 {
		t.Fatalf("Prune before 1 March = %+v, %v; want the 3 events of 1969 deleted", res, err)
	}
	if again, err := tr.Report(ctx, budget.ReportQuery{Since: time.Unix(0, -2*nsDay), Until: day, By: []budget.Dim{budget.DimDay}}); err != nil ||
		len(again) != 3 || !reflect.DeepEqual(again, rows[:3]) {
		t.Fatalf("report by day after the prune = %+v, %v; want %+v", again, err, rows[:3])
	}
	if as, err := tr.Alerts(ctx, 10); err != nil || len(as) != 1 || as[0].LimitID != each.ID || as[0].Threshold != 25 {
		t.Fatalf("Alerts = %+v, %v; want alice's once limit at 25%% (30 of 100)", as, err)
	}
	if rep, err := tr.CheckStorage(ctx, true); err != nil || len(rep.Problems) != 0 {
		t.Fatalf("CheckStorage after migration = %+v, %v", rep, err)
	}
}

// A schema-13 database's price versions have no 1-hour cache-write price:
// migrated, each prices a 1-hour cache write at its cache-write price.
func TestMigrate13PricesCacheWrite1hAtCacheWrite(t *testing.T) {
	ctx := context.Background()
	dsn := schemaAt(t, 13, `INSERT INTO prices (provider, model, tier, above_input, from_at, input, output, cache_read, cache_write, reasoning)
		VALUES ('anthropic', 'claude', '', 0, 1, 3000000, 15000000, 300000, 3750000, 15000000)`)
	db, err := postgres.Open(ctx, dsn, postgres.Options{MaxConns: 2})
	if err != nil {
		t.Fatalf("Open(schema 13): %v", err)
	}
	defer db.Close()
	tr := storetest.NewTracker(t, db, storetest.NewClock(time.Unix(10, 0)), time.Second)
	ps, err := tr.ListPrices(ctx)
	if err != nil || len(ps) != 1 || ps[0].CacheWrite != 3_750_000 || ps[0].CacheWrite1h != 3_750_000 {
		t.Fatalf("prices after migration = %+v, %v; want claude's 1-hour price at its cache-write price $3.75", ps, err)
	}
}

// A schema-14 database (limits that cannot have scope tag, rollups and
// events without tags) keeps its rollups when migrated, its untagged
// history stays untagged in reports, and it takes a tag limit that
// counts only the tagged events.
func TestMigrate14KeepsRollupsAndTakesTagLimits(t *testing.T) {
	ctx := context.Background()
	dsn := schemaAt(t, 14,
		`INSERT INTO usage (key, request_id, provider, model, input, at) VALUES ('k', 'r1', 'p', 'm', 7, 3600000000000)`,
		`INSERT INTO rollups (day, key, provider, model, requests, input) VALUES (0, 'k', 'p', 'm', 1, 7)`)
	db, err := postgres.Open(ctx, dsn, postgres.Options{MaxConns: 2})
	if err != nil {
		t.Fatalf("Open(schema 14): %v", err)
	}
	defer db.Close()
	c := storetest.NewClock(time.Unix(7200, 0))
	tr := storetest.NewTracker(t, db, c, time.Second)
	rows, err := tr.Report(ctx, budget.ReportQuery{Since: time.Unix(0, 0), Until: time.Unix(86400, 0), By: []budget.Dim{budget.TagDim("project")}})
	if err != nil || len(rows) != 1 || rows[0].Values[0] != "" || rows[0].Input != 7 {
		t.Fatalf("report by tag:project after migration = %+v, %v; want the day's 7 tokens, untagged", rows, err)
	}
	l := storetest.SetLimit(t, tr, budget.LimitSpec{Key: "k", Scope: "tag", ScopeValue: "project=*", Window: "daily"}, 100)
	storetest.RecordSync(t, tr, budget.Usage{Key: "k", RequestID: "e1", Tags: "project=atlas", Input: 30, At: c.Now()},
		budget.Usage{Key: "k", RequestID: "e2", Input: 50, At: c.Now()})
	if u, _ := storetest.Used(t, tr, budget.Request{Key: "k", Tags: "project=atlas"}, c.Now(), l.ID); u != 30 {
		t.Fatalf("atlas's counter used %d; want 30", u)
	}
	if drift, err := tr.Verify(ctx); err != nil || len(drift) != 0 {
		t.Fatalf("Verify after migration = %+v, %v; want clean", drift, err)
	}
}
