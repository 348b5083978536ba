package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// golden compares got with the golden file name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("..", "..", "testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/budget -run Golden -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (go test ./cmd/budget -run Golden -update rewrites it)\ngot:\n%s\nwant:\n%s", name, got, want)
	}
}

// goldenDB builds a database whose inspect output is fully determined: ids
// given with --id, events at fixed instants, the wall clock fixed (testNow,
// the logged_at of every rollover).
func goldenDB(t *testing.T) string {
	t.Helper()
	db := tempDB(t)
	for _, a := range [][]string{
		{"--key", "demo", "--limit", "1000", "--window", "daily", "--reset-time", "09:00", "--tz", "Europe/Paris", "--id", "demo-day"},
		{"--key", "demo", "--scope", "model", "--value", "gpt-4o", "--limit", "500", "--window", "1h", "--id", "demo-gpt-hour"},
		{"--key", "demo", "--scope", "provider", "--value", "openai", "--metric", "requests", "--limit", "10", "--window", "5m", "--id", "demo-openai-req"},
		{"--key", "demo", "--metric", "concurrent", "--limit", "2", "--id", "demo-conc"},
		{"--key", "demo", "--metric", "output", "--limit", "50", "--window", "1h", "--disabled", "--id", "demo-out-off"},
		{"--key", "team", "--metric", "input", "--limit", "100", "--window", "weekly", "--id", "team-week"},
	} {
		mustRun(t, 0, append([]string{"limit", "set", "--db", db}, a...)...)
	}
	for _, e := range []struct{ key, provider, model, input, output, reasoning, id, at string }{
		{"demo", "openai", "gpt-4o", "100", "20", "0", "e1", "2026-03-02T09:10:00Z"},
		{"demo", "openai", "gpt-4o", "200", "30", "10", "e2", "2026-03-02T10:05:00Z"},
		{"demo", "anthropic", "claude", "40", "2", "0", "e3", "2026-03-02T10:20:00Z"},
		{"demo", "openai", "gpt-4o-mini", "70", "5", "0", "e4", "2026-03-02T10:36:00Z"},
		{"team", "openai", "gpt-4o", "60", "0", "0", "e5", "2026-02-27T12:00:00Z"},
		{"team", "openai", "gpt-4o", "30", "0", "0", "e6", "2026-03-02T08:00:00Z"},
	} {
		mustRun(t, 0, "record", "--db", db, "--key", e.key, "--provider", e.provider, "--model", e.model,
			"--input", e.input, "--output", e.output, "--reasoning", e.reasoning, "--request-id", e.id, "--at", e.at)
	}
	mustRun(t, 0, "provider", "park", "anthropic", "--db", db, "--kind", "overloaded", "--retry-after", "15m", "--at", "2026-03-02T10:30:00Z")
	return db
}

func TestInspectGolden(t *testing.T) {
	t.Parallel()
	db := goldenDB(t)
	at := "2026-03-02T10:40:00Z"
	golden(t, "inspect.txt", mustRun(t, 0, "inspect", "--db", db, "--at", at).stdout)
	golden(t, "inspect.json", mustRun(t, 0, "inspect", "--db", db, "--at", at, "--json").stdout)
	golden(t, "inspect-key.json", mustRun(t, 0, "inspect", "--db", db, "--at", at, "--key", "team", "--rollovers", "1", "--json").stdout)
}

// TestInspectGoldenReserved: reserved amounts and live leases per limit.
// The reservations have random ids, which inspect does not show. The one
// with a 30s TTL has expired by the third reserve and the inspected
// instant: it counts no more (its lease is free), though nothing recovered
// it.
func TestInspectGoldenReserved(t *testing.T) {
	t.Parallel()
	db := goldenDB(t)
	for _, r := range []struct {
		after time.Duration // on the clock, after testNow
		args  []string
	}{
		{0, []string{"--key", "demo", "--model", "gpt-4o", "--tokens", "7", "--ttl", "30s"}},
		{0, []string{"--key", "demo", "--provider", "openai", "--model", "gpt-4o", "--tokens", "50"}},
		{45 * time.Second, []string{"--key", "demo", "--provider", "openai", "--model", "gpt-4o-mini", "--tokens", "25", "--ttl", "5m"}},
		{0, []string{"--key", "team", "--provider", "openai", "--model", "gpt-4o", "--tokens", "15"}},
	} {
		mustRunAt(t, testNow.Add(r.after), 0, append([]string{"reserve", "--db", db}, r.args...)...)
	}
	at := "2026-03-02T12:01:00Z"
	golden(t, "inspect-reserved.txt", mustRun(t, 0, "inspect", "--db", db, "--at", at).stdout)
	golden(t, "inspect-reserved.json", mustRun(t, 0, "inspect", "--db", db, "--at", at, "--json").stdout)
}

func TestInspectJSONShape(t *testing.T) {
	t.Parallel()
	db := goldenDB(t)
	v := decode(t, mustRun(t, 0, "inspect", "--db", db, "--at", "2026-03-02T10:40:00.9Z", "--json").stdout)
	wantKeys(t, "inspect --json", v, "at", "limits", "rollovers", "providers")
	if v["at"] != "2026-03-02T10:40:00Z" {
		t.Errorf("at: got %v; want whole seconds in UTC", v["at"])
	}
	for _, l := range v["limits"].([]any) {
		wantKeys(t, "inspect --json limit", l, statusFields...)
	}
	for _, r := range v["rollovers"].([]any) {
		wantKeys(t, "inspect --json rollover", r, "limit_id", "prev_window_start", "prev_used", "window_start", "logged_at")
	}
	for _, p := range v["providers"].([]any) {
		wantKeys(t, "inspect --json provider", p, "provider", "kind", "parked_at", "resume_at", "probe_failures")
	}
	// --rollovers 0 is an empty list, not null.
	out := mustRun(t, 0, "inspect", "--db", db, "--rollovers", "0", "--json").stdout
	if !strings.Contains(out, `"rollovers": []`) {
		t.Errorf("inspect --rollovers 0: got %s; want \"rollovers\": []", out)
	}
	// An empty database lists nothing, with [] everywhere.
	empty := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", empty, "--key", "k", "--limit", "1", "--window", "1h", "--id", "x")
	mustRun(t, 0, "limit", "rm", "--db", empty, "x")
	got := strings.Join(strings.Fields(mustRun(t, 0, "inspect", "--db", empty, "--json").stdout), "")
	if want := `{"at":"2026-03-02T12:00:00Z","limits":[],"rollovers":[],"providers":[]}`; got != want {
		t.Errorf("inspect of an empty database: got %s; want %s", got, want)
	}
}

func TestInspectBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args         []string
		field, value string
	}{
		{[]string{"--at", "2026-03-02T10:40"}, "at", "2026-03-02T10:40"},
		{[]string{"--rollovers", "-1"}, "rollovers", "-1"},
		{[]string{"--rollovers", "many"}, "rollovers", "many"},
	} {
		db := tempDB(t)
		r := run(t, append([]string{"inspect", "--db", db}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.field) || !strings.Contains(r.stderr, tc.value) || exists(db) {
			t.Errorf("inspect %q: got %v; want exit 2 naming %s and %s, no database", tc.args, r, tc.field, tc.value)
		}
	}
}
