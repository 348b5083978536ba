package dashboard_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/dashboard"
)

// now is the fixtures' clock: half past six, half-way through the hour.
var now = time.Date(2026, 3, 2, 18, 30, 0, 0, time.UTC)

// hostile is a key name made of markup: every page must show it as text.
const hostile = `<img src=x onerror=alert(1)>"&'`

// fixture is a database with known usage at now:
//
//   - alice (no team): lim_alice, 1,000 tokens per 1h alerting at 50 and
//     80 %, 300 used at 18:05 and 200 at 18:25: 50 % used (an alert), and
//     at the pace of the last 7.5 minutes (200 tokens) it runs out at
//     18:48:45, before the 19:00 reset;
//   - bob (team eng of org acme): lim_bob, 10,000 tokens daily, 1,000 used
//     at 10:00: no usage lately, the forecast stays at 10 %;
//   - team eng: lim_eng, $5 daily (gpt-4o-mini priced at $1/M in and out);
//   - the hostile key: lim_hostile, 100 tokens per 1h, 100 used: full.
//
// The usage of alice and bob is 2,000 gpt-4o-mini tokens over the last
// days too (bob: 400 on Feb 28 with gpt-4o).
type fixture struct {
	db *tokenbudget.DB
}

func newFixture(tb testing.TB) *fixture {
	tb.Helper()
	ctx := context.Background()
	cfg := budget.DefaultConfig()
	cfg.Now = func() time.Time { return now }
	db, err := tokenbudget.Open(ctx, filepath.Join(tb.TempDir(), "budget.db"), tokenbudget.Options{Create: true, Config: &cfg})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close(context.Background()) })
	f := &fixture{db: db}
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	_, err = db.SetPrices(ctx, budget.PriceSpec{Provider: "openai", Model: "gpt-4o-mini", From: now.AddDate(0, -1, 0), Input: "1", Output: "1"})
	must(err)
	_, err = db.SetTeam(ctx, "eng", "acme")
	must(err)
	must(db.SetKeyTeam(ctx, "bob", "eng"))
	f.limit(tb, budget.LimitSpec{ID: "lim_alice", Key: "alice", Window: "1h", Alerts: &[]int{50, 80}}, 1000)
	f.limit(tb, budget.LimitSpec{ID: "lim_bob", Key: "bob", Window: "daily"}, 10_000)
	f.limit(tb, budget.LimitSpec{ID: "lim_eng", Team: "eng", Metric: "usd", Window: "daily"}, 5_000_000)
	f.limit(tb, budget.LimitSpec{ID: "lim_hostile", Key: hostile, Window: "1h"}, 100)
	at := func(h, m int) time.Time { return time.Date(2026, 3, 2, h, m, 0, 0, time.UTC) }
	f.record(tb,
		budget.Usage{Key: "alice", Input: 200, Output: 100, At: at(18, 5)},
		budget.Usage{Key: "alice", Input: 150, Output: 50, At: at(18, 25)},
		budget.Usage{Key: "bob", Input: 600, Output: 400, At: at(10, 0)},
		budget.Usage{Key: hostile, Input: 100, At: at(18, 10)},
		budget.Usage{Key: "alice", Input: 1500, Output: 500, At: time.Date(2026, 2, 27, 12, 0, 0, 0, time.UTC)},
		budget.Usage{Key: "bob", Model: "gpt-4o", Input: 300, Output: 100, At: time.Date(2026, 2, 28, 12, 0, 0, 0, time.UTC)},
	)
	return f
}

func (f *fixture) limit(tb testing.TB, s budget.LimitSpec, max int64) {
	tb.Helper()
	s.Max = &max
	if _, _, err := f.db.SetLimit(context.Background(), s); err != nil {
		tb.Fatal(err)
	}
}

// record writes events of provider openai, model gpt-4o-mini unless
// they say otherwise, numbered request ids.
func (f *fixture) record(tb testing.TB, us ...budget.Usage) {
	tb.Helper()
	for i := range us {
		if us[i].Provider == "" {
			us[i].Provider = "openai"
		}
		if us[i].Model == "" {
			us[i].Model = "gpt-4o-mini"
		}
		if us[i].RequestID == "" {
			us[i].RequestID = budget.NewID("req_")
		}
	}
	if _, err := f.db.RecordSync(context.Background(), us...); err != nil {
		tb.Fatal(err)
	}
}

// handler is the dashboard of f with cfg's options, at now.
func (f *fixture) handler(tb testing.TB, cfg dashboard.Config) *dashboard.Handler {
	tb.Helper()
	cfg.Tracker = f.db.Tracker
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return now }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	h, err := dashboard.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

// get serves target with h and returns the status and body.
func get(tb testing.TB, h http.Handler, target string) (int, string) {
	tb.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}
