package main

import (
	"slices"
	"strings"
	"testing"
)

// alertFields are the fields of an alert: alerts ls --json and the webhook.
var alertFields = []string{"id", "limit_id", "level", "owner", "subject", "kind", "window_start", "threshold", "metric", "used", "limit",
	"at", "forecast_used", "exhausts_at", "delivered_at"}

// TestLimitSetAlert: --alert sets thresholds (sorted), an update without it
// keeps them, --alert "" removes them; the limit object lists them.
func TestLimitSetAlert(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	alerts := func(out string) []any { return decode(t, out)["alerts"].([]any) }
	l := mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--limit", "100", "--window", "daily", "--alert", "80,50%,100", "--json").stdout
	if got := alerts(l); !slices.Equal(got, []any{50.0, 80.0, 100.0}) {
		t.Errorf("limit set --alert 80,50%%,100: alerts %v; want [50 80 100]", got)
	}
	l = mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--limit", "200", "--window", "daily", "--json").stdout
	if got := alerts(l); len(got) != 3 {
		t.Errorf("an update without --alert: alerts %v; want them kept", got)
	}
	ls := mustRun(t, 0, "limit", "ls", "--db", db).stdout
	if !strings.Contains(ls, "ALERTS") || !strings.Contains(ls, "50%,80%,100%") {
		t.Errorf("limit ls: got\n%s\nwant an ALERTS column with 50%%,80%%,100%%", ls)
	}
	l = mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--window", "daily", "--alert", "", "--json").stdout
	if got := alerts(l); got == nil || len(got) != 0 {
		t.Errorf(`limit set --alert "": alerts %v; want []`, got)
	}
	v := decode(t, mustRun(t, 0, "limit", "ls", "--db", db, "--json").stdout)
	wantKeys(t, "limit ls --json limit", v["limits"].([]any)[0], limitFields...)
}

// TestLimitSetAlertInvalid: bad thresholds exit 2 naming alert and the
// value, before a database is created.
func TestLimitSetAlertInvalid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args  []string
		value string
	}{
		{[]string{"--alert", "0"}, "0"},
		{[]string{"--alert", "1001"}, "1001"},
		{[]string{"--alert", "eighty"}, "eighty"},
		{[]string{"--alert", "50,,80"}, `""`},
		{[]string{"--alert", "50,50"}, "50"},
		{[]string{"--alert", "-5"}, "-5"},
		{[]string{"--metric", "concurrent", "--window", "", "--alert", "50"}, "50"},
	} {
		db := tempDB(t)
		args := append([]string{"limit", "set", "--db", db, "--key", "k", "--limit", "100", "--window", "daily"}, tc.args...)
		r := run(t, args...)
		if r.code != 2 || !strings.Contains(r.stderr, "alert") || !strings.Contains(r.stderr, tc.value) || exists(db) {
			t.Errorf("limit set %q: got %v; want exit 2 naming alert and %s, no database", tc.args, r, tc.value)
		}
	}
}

// TestAlertsLs: usage crossing thresholds logs one alert each, listed
// newest first with the fields, undelivered.
func TestAlertsLs(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--limit", "100", "--window", "daily", "--alert", "50,80", "--id", "lim")
	if out := mustRun(t, 0, "alerts", "ls", "--db", db, "--json").stdout; strings.Join(strings.Fields(out), "") != `{"alerts":[]}` {
		t.Errorf("alerts ls --json before any: got %s; want {\"alerts\": []}", out)
	}
	if out := mustRun(t, 0, "alerts", "ls", "--db", db).stdout; out != "no alerts\n" {
		t.Errorf("alerts ls before any: got %q; want no alerts", out)
	}
	record := func(id, input, at string) { // logged at the wall clock: the record's instant
		clock, _ := parseAt(at)
		mustRunAt(t, clock, 0, "record", "--db", db, "--key", "k", "--provider", "openai", "--model", "m", "--input", input,
			"--request-id", id, "--at", at)
	}
	record("r1", "60", "2026-03-02T10:00:00Z") // crosses 50
	record("r2", "10", "2026-03-02T10:30:00Z") // none
	record("r3", "15", "2026-03-02T11:00:00Z") // crosses 80
	v := decode(t, mustRun(t, 0, "alerts", "ls", "--db", db, "--json").stdout)
	wantKeys(t, "alerts ls --json", v, "alerts")
	as := v["alerts"].([]any)
	if len(as) != 2 {
		t.Fatalf("alerts: got %d; want 2 (50%% and 80%%): %v", len(as), as)
	}
	for i, want := range []struct {
		threshold, used float64
		at              string
	}{{80, 85, "2026-03-02T11:00:00Z"}, {50, 60, "2026-03-02T10:00:00Z"}} { // newest first
		a := as[i].(map[string]any)
		wantKeys(t, "alert", a, alertFields...)
		if a["threshold"] != want.threshold || a["kind"] != "threshold" || a["metric"] != "tokens" || a["used"] != want.used || a["limit"] != 100.0 || a["limit_id"] != "lim" ||
			a["level"] != "key" || a["owner"] != "k" || a["window_start"] != "2026-03-02T00:00:00Z" || a["delivered_at"] != nil || a["at"] != want.at {
			t.Errorf("alert %d: got %v; want threshold %v, used %v of 100 on lim (key k) at %s, today's window, undelivered", i, a, want.threshold, want.used, want.at)
		}
	}
	if out := decode(t, mustRun(t, 0, "alerts", "ls", "--db", db, "--limit", "1", "--json").stdout); len(out["alerts"].([]any)) != 1 {
		t.Errorf("alerts ls --limit 1: got %v; want one alert", out)
	}
	table := mustRun(t, 0, "alerts", "ls", "--db", db).stdout
	for _, want := range []string{"THRESHOLD", "80%", "85/100", "50%", "60/100"} {
		if !strings.Contains(table, want) {
			t.Errorf("alerts ls: got\n%s\nwant %q", table, want)
		}
	}
	if r := run(t, "alerts", "ls", "--db", db, "--limit", "0"); r.code != 2 || !strings.Contains(r.stderr, "limit") {
		t.Errorf("alerts ls --limit 0: got %v; want exit 2 naming limit", r)
	}
	missing := tempDB(t)
	if r := run(t, "alerts", "ls", "--db", missing); r.code != 1 || exists(missing) {
		t.Errorf("alerts ls on a missing database: got %v; want exit 1, no database", r)
	}
}

// TestAlertsExhausted: a reservation refused for want of room logs one
// exhausted alert per window (threshold null); a refused check logs none.
func TestAlertsExhausted(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--limit", "100", "--window", "daily", "--alert", "100", "--id", "lim")
	reserve := func(code int, tokens string) {
		mustRun(t, code, "reserve", "--db", db, "--key", "k", "--provider", "openai", "--model", "m", "--tokens", tokens, "--ttl", "1h")
	}
	reserve(0, "90")
	mustRun(t, 3, "check", "--db", db, "--key", "k", "--provider", "openai", "--model", "m", "--tokens", "20")
	if out := mustRun(t, 0, "alerts", "ls", "--db", db).stdout; out != "no alerts\n" {
		t.Fatalf("alerts ls after a refused check: got %q; want no alerts", out)
	}
	reserve(3, "20")
	reserve(3, "20")
	v := decode(t, mustRun(t, 0, "alerts", "ls", "--db", db, "--json").stdout)
	as := v["alerts"].([]any)
	if len(as) != 1 {
		t.Fatalf("alerts after two refused reservations: got %v; want one exhausted", as)
	}
	a := as[0].(map[string]any)
	wantKeys(t, "exhausted alert", a, alertFields...)
	if a["kind"] != "exhausted" || a["threshold"] != nil || a["metric"] != "tokens" || a["used"] != 90.0 || a["limit"] != 100.0 || a["limit_id"] != "lim" {
		t.Errorf("exhausted alert: got %v; want kind exhausted, threshold null, 90 of 100 tokens on lim", a)
	}
	table := mustRun(t, 0, "alerts", "ls", "--db", db).stdout
	for _, want := range []string{"exhausted", "90/100"} {
		if !strings.Contains(table, want) {
			t.Errorf("alerts ls: got\n%s\nwant %q", table, want)
		}
	}
}
