package main

import (
	"strings"
	"testing"
)

func TestLimitSetPrintsID(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	r := mustRun(t, 0, "limit", "set", "--db", db, "--key", "demo", "--limit", "1000", "--window", "daily")
	id := strings.TrimSpace(r.stdout)
	if !strings.HasPrefix(id, "lim_") || strings.Contains(id, "\n") {
		t.Errorf("limit set: got stdout %q; want one generated id", r.stdout)
	}
	r = mustRun(t, 0, "limit", "set", "--db", db, "--key", "demo", "--limit", "5", "--window", "1h", "--id", "my-hour")
	if r.stdout != "my-hour\n" {
		t.Errorf("limit set --id: got stdout %q; want my-hour", r.stdout)
	}
}

func TestLimitSetJSON(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	for _, tc := range []struct {
		args                    []string
		window, resetTime, zone any
	}{
		{[]string{"--window", "60m"}, "1h", nil, nil},
		{[]string{"--window", "weekly", "--reset-time", "09:30", "--tz", "Europe/Paris"}, "weekly", "09:30", "Europe/Paris"},
		{[]string{"--window", "monthly"}, "monthly", "00:00", "UTC"},
		{[]string{"--metric", "concurrent"}, nil, nil, nil},
	} {
		args := append([]string{"limit", "set", "--db", db, "--key", "demo", "--limit", "7", "--json"}, tc.args...)
		v := decode(t, mustRun(t, 0, args...).stdout)
		wantKeys(t, "limit set --json", v, limitFields...)
		if v["window"] != tc.window || v["reset_time"] != tc.resetTime || v["timezone"] != tc.zone {
			t.Errorf("limit set %v: got window %v reset_time %v timezone %v; want %v %v %v",
				tc.args, v["window"], v["reset_time"], v["timezone"], tc.window, tc.resetTime, tc.zone)
		}
		if v["limit"] != 7.0 || v["enabled"] != true || v["scope"] != "global" || v["scope_value"] != "" || v["key"] != "demo" {
			t.Errorf("limit set %v: got %v", tc.args, v)
		}
	}
}

// TestLimitSetUpdate: the same identity updates in place and keeps what its
// flags do not mention.
func TestLimitSetUpdate(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	base := []string{"limit", "set", "--db", db, "--key", "demo", "--scope", "model", "--value", "gpt-4o", "--window", "daily"}
	id := strings.TrimSpace(mustRun(t, 0, append(base, "--limit", "100", "--tz", "Asia/Tokyo", "--reset-time", "06:00")...).stdout)

	v := decode(t, mustRun(t, 0, append(base, "--limit", "200", "--json")...).stdout)
	if v["id"] != id || v["limit"] != 200.0 || v["timezone"] != "Asia/Tokyo" || v["reset_time"] != "06:00" || v["enabled"] != true {
		t.Errorf("update --limit: got %v; want id %s, limit 200, zone and reset time kept", v, id)
	}
	v = decode(t, mustRun(t, 0, append(base, "--disabled", "--json")...).stdout)
	if v["limit"] != 200.0 || v["enabled"] != false {
		t.Errorf("update --disabled: got %v; want limit 200 kept, disabled", v)
	}
	v = decode(t, mustRun(t, 0, append(base, "--enabled", "--tz", "UTC", "--json")...).stdout)
	if v["enabled"] != true || v["timezone"] != "UTC" || v["reset_time"] != "06:00" {
		t.Errorf("update --enabled --tz UTC: got %v", v)
	}
	// Addressed by id, with the same identity.
	v = decode(t, mustRun(t, 0, append(base, "--id", id, "--limit", "300", "--json")...).stdout)
	if v["id"] != id || v["limit"] != 300.0 {
		t.Errorf("update by --id: got %v", v)
	}
	ls := decode(t, mustRun(t, 0, "limit", "ls", "--db", db, "--json").stdout)["limits"].([]any)
	if len(ls) != 1 {
		t.Errorf("after updates: got %d limits; want 1", len(ls))
	}
	// --window spelled differently is the same window.
	v = decode(t, mustRun(t, 0, "limit", "set", "--db", db, "--key", "demo", "--limit", "1", "--window", "1h", "--json").stdout)
	v2 := decode(t, mustRun(t, 0, "limit", "set", "--db", db, "--key", "demo", "--limit", "2", "--window", "3600s", "--json").stdout)
	if v["id"] != v2["id"] || v2["limit"] != 2.0 {
		t.Errorf("1h then 3600s: got ids %v and %v; want one limit updated", v["id"], v2["id"])
	}
}

// TestLimitSetBadInput: every bad input exits 2, names the field and the
// value, and writes nothing: no database is created, and on an existing
// database the limits are unchanged.
func TestLimitSetBadInput(t *testing.T) {
	t.Parallel()
	existing := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", existing, "--key", "demo", "--limit", "10", "--window", "1h", "--id", "taken")
	mustRun(t, 0, "limit", "set", "--db", existing, "--key", "demo", "--limit", "10", "--window", "daily", "--id", "daily")
	before := mustRun(t, 0, "limit", "ls", "--db", existing, "--json").stdout

	for _, tc := range []struct {
		args  []string
		field string // names the field
		value string // and the value
	}{
		{[]string{"--key", "", "--limit", "1", "--window", "1h"}, "key", `""`},
		{[]string{"--key", "  ", "--limit", "1", "--window", "1h"}, "key", `""`},
		{[]string{"--key", "k", "--scope", "team", "--limit", "1", "--window", "1h"}, "scope", "team"},
		{[]string{"--key", "k", "--metric", "dollars", "--limit", "1", "--window", "1h"}, "metric", "dollars"},
		{[]string{"--key", "k", "--value", "openai", "--limit", "1", "--window", "1h"}, "value", "openai"},
		{[]string{"--key", "k", "--scope", "provider", "--limit", "1", "--window", "1h"}, "value", `""`},
		{[]string{"--key", "k", "--scope", "model", "--value", " ", "--limit", "1", "--window", "1h"}, "value", `""`},
		{[]string{"--key", "k", "--limit", "1", "--window", "500ms"}, "window", "500ms"},
		{[]string{"--key", "k", "--limit", "1", "--window", "0s"}, "window", "0s"},
		{[]string{"--key", "k", "--limit", "1", "--window", "1.5s"}, "window", "1.5s"},
		{[]string{"--key", "k", "--limit", "1", "--window", "fortnightly"}, "window", "fortnightly"},
		{[]string{"--key", "k", "--limit", "1"}, "window", `""`},
		{[]string{"--key", "k", "--limit", "1", "--window", "daily", "--reset-time", "24:00"}, "reset_time", "24:00"},
		{[]string{"--key", "k", "--limit", "1", "--window", "daily", "--reset-time", "9:00"}, "reset_time", "9:00"},
		{[]string{"--key", "k", "--limit", "1", "--window", "daily", "--tz", "Nowhere/Special"}, "timezone", "Nowhere/Special"},
		{[]string{"--key", "k", "--limit", "1", "--window", "daily", "--tz", "Local"}, "timezone", "Local"},
		{[]string{"--key", "k", "--limit", "1", "--window", "1h", "--tz", "UTC"}, "timezone", "UTC"},
		{[]string{"--key", "k", "--limit", "1", "--window", "1h", "--reset-time", "08:00"}, "reset_time", "08:00"},
		{[]string{"--key", "k", "--limit", "1", "--metric", "concurrent", "--window", "1h"}, "window", "1h"},
		{[]string{"--key", "k", "--limit", "0", "--window", "1h"}, "limit", "0"},
		{[]string{"--key", "k", "--limit", "-5", "--window", "1h"}, "limit", "-5"},
		{[]string{"--key", "k", "--limit", "9007199254740992", "--window", "1h"}, "limit", "9007199254740992"},
		{[]string{"--key", "k", "--limit", "ten", "--window", "1h"}, "limit", "ten"},
		{[]string{"--key", "k", "--limit", "1", "--window", "1h", "--disabled", "--enabled"}, "enabled", "true"},
	} {
		fresh := tempDB(t)
		r := run(t, append([]string{"limit", "set", "--db", fresh}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.field) || !strings.Contains(r.stderr, tc.value) {
			t.Errorf("limit set %q: got %v; want exit 2 naming %s and %s", tc.args, r, tc.field, tc.value)
		}
		if exists(fresh) {
			t.Errorf("limit set %q created the database", tc.args)
		}
		r = run(t, append([]string{"limit", "set", "--db", existing}, tc.args...)...)
		if r.code != 2 {
			t.Errorf("limit set %q on an existing db: got %v; want exit 2", tc.args, r)
		}
	}

	// Identity conflicts are found in the database: still exit 2, nothing written.
	for _, tc := range []struct {
		args         []string
		field, value string
	}{
		// An existing id with another window.
		{[]string{"--key", "demo", "--limit", "1", "--window", "5m", "--id", "taken"}, "id", "taken"},
		// An existing id with another key.
		{[]string{"--key", "other", "--limit", "1", "--window", "1h", "--id", "taken"}, "id", "taken"},
		// A new id for a tuple another limit has.
		{[]string{"--key", "demo", "--limit", "1", "--window", "daily", "--id", "new-one"}, "id", "new-one"},
		// No --limit, and no limit to update.
		{[]string{"--key", "demo", "--window", "5m"}, "limit", `""`},
	} {
		r := run(t, append([]string{"limit", "set", "--db", existing}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.field) || !strings.Contains(r.stderr, tc.value) {
			t.Errorf("limit set %q: got %v; want exit 2 naming %s %s", tc.args, r, tc.field, tc.value)
		}
	}
	if after := mustRun(t, 0, "limit", "ls", "--db", existing, "--json").stdout; after != before {
		t.Errorf("bad input changed the limits:\nbefore %s\nafter %s", before, after)
	}

	// Without --limit on a missing database: invalid, not "no such file".
	fresh := tempDB(t)
	r := run(t, "limit", "set", "--db", fresh, "--key", "demo", "--window", "1h")
	if r.code != 2 || !strings.Contains(r.stderr, "limit") || exists(fresh) {
		t.Errorf("limit set without --limit on a missing db: got %v; want exit 2, no file", r)
	}
}

func TestLimitLs(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--limit", "1", "--window", "1h", "--id", "first")
	mustRun(t, 0, "limit", "rm", "--db", db, "first")

	if got := mustRun(t, 0, "limit", "ls", "--db", db, "--json").stdout; strings.Join(strings.Fields(got), "") != `{"limits":[]}` {
		t.Errorf("limit ls --json on no limits: got %s; want {\"limits\": []}", got)
	}
	if got := mustRun(t, 0, "limit", "ls", "--db", db).stdout; got != "no limits\n" {
		t.Errorf("limit ls on no limits: got %q", got)
	}

	for _, a := range [][]string{
		{"--key", "b", "--limit", "1", "--window", "1h", "--id", "b1"},
		{"--key", "a", "--scope", "model", "--value", "m", "--limit", "1", "--window", "1h", "--id", "a-model"},
		{"--key", "a", "--scope", "provider", "--value", "p", "--limit", "1", "--window", "1h", "--id", "a-prov"},
		{"--key", "a", "--limit", "1", "--window", "daily", "--id", "a-day"},
		{"--key", "a", "--limit", "1", "--window", "1m", "--id", "a-min"},
		{"--key", "a", "--metric", "input", "--limit", "1", "--window", "1m", "--id", "a-input"},
	} {
		mustRun(t, 0, append([]string{"limit", "set", "--db", db}, a...)...)
	}
	v := decode(t, mustRun(t, 0, "limit", "ls", "--db", db, "--json").stdout)
	wantKeys(t, "limit ls --json", v, "limits")
	var ids []string
	for _, l := range v["limits"].([]any) {
		wantKeys(t, "limit ls --json limit", l, limitFields...)
		ids = append(ids, l.(map[string]any)["id"].(string))
	}
	// key, then scope (global, provider, model), value, metric, window length, id.
	if got, want := strings.Join(ids, " "), "a-input a-min a-day a-prov a-model b1"; got != want {
		t.Errorf("limit ls order: got %s; want %s", got, want)
	}
	v = decode(t, mustRun(t, 0, "limit", "ls", "--db", db, "--key", "b", "--json").stdout)
	if n := len(v["limits"].([]any)); n != 1 {
		t.Errorf("limit ls --key b: got %d limits; want 1", n)
	}
	text := mustRun(t, 0, "limit", "ls", "--db", db).stdout
	for _, s := range []string{"ID", "WINDOW", "a-day", "daily 00:00 UTC", "provider=p", "model=m"} {
		if !strings.Contains(text, s) {
			t.Errorf("limit ls text lacks %q:\n%s", s, text)
		}
	}
}

func TestLimitRm(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--limit", "1", "--window", "1h", "--id", "gone")
	mustRun(t, 0, "limit", "rm", "--db", db, "gone")
	r := mustRun(t, 4, "limit", "rm", "--db", db, "gone")
	if !strings.Contains(r.stderr, "gone") || !strings.Contains(r.stderr, "not found") {
		t.Errorf("limit rm of an unknown id: got %v; want it named, not found", r)
	}
	mustRun(t, 2, "limit", "rm", "--db", db, "a", "b")
	mustRun(t, 2, "limit", "rm", "--db", db, " ")
}

// TestLimitSetByIDOnly: --id alone addresses a stored limit: only the
// flags given change, the amount is read in the stored limit's metric
// (dollars for a usd limit), the counters stay, and an unknown id exits 4
// and writes nothing.
func TestLimitSetByIDOnly(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "team", "set", "--db", db, "ops")
	mustRun(t, 0, "limit", "set", "--db", db, "--team", "ops", "--metric", "usd", "--limit", "1.50", "--window", "daily",
		"--tz", "Europe/Paris", "--alert", "50,100", "--id", "ops-usd")
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "demo", "--scope", "model", "--value", "gpt-4o", "--limit", "100",
		"--window", "1h", "--id", "hour")
	mustRun(t, 0, "record", "--db", db, "--key", "demo", "--provider", "openai", "--model", "gpt-4o", "--input", "60", "--output", "10",
		"--request-id", "r1", "--at", "2026-03-02T11:30:00Z")
	usedOf := func(id string) any {
		t.Helper()
		v := decode(t, mustRun(t, 0, "check", "--db", db, "--key", "demo", "--provider", "openai", "--model", "gpt-4o",
			"--at", "2026-03-02T11:45:00Z", "--json").stdout)
		for _, l := range v["limits"].([]any) {
			if l := l.(map[string]any); l["id"] == id {
				return l["used"]
			}
		}
		return nil
	}
	if got := usedOf("hour"); got != 70.0 {
		t.Fatalf("before the update: used %v; want 70", got)
	}

	v := decode(t, mustRun(t, 0, "limit", "set", "--db", db, "--id", "ops-usd", "--limit", "2.25", "--json").stdout)
	if v["limit"] != 2_250_000.0 || v["level"] != "team" || v["owner"] != "ops" || v["metric"] != "usd" || v["window"] != "daily" ||
		v["timezone"] != "Europe/Paris" || v["enabled"] != true || len(v["alerts"].([]any)) != 2 {
		t.Errorf("--id ops-usd --limit 2.25: got %v; want $2.25, everything else kept", v)
	}
	v = decode(t, mustRun(t, 0, "limit", "set", "--db", db, "--id", "hour", "--limit", "500", "--json").stdout)
	if v["limit"] != 500.0 || v["key"] != "demo" || v["scope"] != "model" || v["scope_value"] != "gpt-4o" || v["window"] != "1h" {
		t.Errorf("--id hour --limit 500: got %v", v)
	}
	if got := usedOf("hour"); got != 70.0 {
		t.Errorf("after a new max: used %v; want the counters kept (70)", got)
	}
	v = decode(t, mustRun(t, 0, "limit", "set", "--db", db, "--id", "hour", "--disabled", "--json").stdout)
	if v["limit"] != 500.0 || v["enabled"] != false {
		t.Errorf("--id hour --disabled: got %v", v)
	}

	before := mustRun(t, 0, "limit", "ls", "--db", db, "--json").stdout
	for _, tc := range []struct {
		args         []string
		code         int
		field, value string
	}{
		{[]string{"--id", "nope", "--limit", "5"}, 4, "nope", "nope"},
		{[]string{"--id", "ops-usd", "--limit", "1.2345678"}, 2, "limit", "1.2345678"},
		{[]string{"--id", "hour", "--limit", "1.5"}, 2, "limit", "1.5"},
		{[]string{"--id", "hour", "--limit", "5", "--window", "daily"}, 2, "id", "hour"},
	} {
		r := run(t, append([]string{"limit", "set", "--db", db}, tc.args...)...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.field) || !strings.Contains(r.stderr, tc.value) {
			t.Errorf("limit set %q: got %v; want exit %d naming %s %s", tc.args, r, tc.code, tc.field, tc.value)
		}
	}
	if after := mustRun(t, 0, "limit", "ls", "--db", db, "--json").stdout; after != before {
		t.Errorf("refused updates changed the limits:\nbefore %s\nafter %s", before, after)
	}
	fresh := tempDB(t)
	if r := run(t, "limit", "set", "--db", fresh, "--id", "nope", "--limit", "5"); r.code != 4 || exists(fresh) {
		t.Errorf("--id on a missing database: got %v (created %v); want exit 4, no file", r, exists(fresh))
	}
}
