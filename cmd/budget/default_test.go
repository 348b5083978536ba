package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// Default limits from the CLI: set with --default (not with --key), listed
// with a null key, shown by inspect --key K with K's own usage, for any K.
func TestDefaultLimits(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	r := mustRun(t, 0, "limit", "set", "--db", db, "--default", "--limit", "100", "--window", "daily", "--id", "d", "--json")
	v := decode(t, r.stdout)
	wantKeys(t, "limit set --default --json", v, limitFields...)
	if v["key"] != nil || v["id"] != "d" {
		t.Errorf("default limit JSON: got %s; want key null", r.stdout)
	}
	r = mustRun(t, 2, "limit", "set", "--db", db, "--default", "--key", "a", "--limit", "1", "--window", "daily")
	if !strings.Contains(r.stderr, "key") {
		t.Errorf("--default with --key: stderr %q; want it to name key", r.stderr)
	}
	mustRun(t, 0, "record", "--db", db, "--key", "a", "--provider", "p", "--model", "m", "--input", "60")
	mustRun(t, 0, "record", "--db", db, "--key", "b", "--provider", "p", "--model", "m", "--input", "7")
	for key, want := range map[string]float64{"a": 60, "b": 7, "nobody": 0} {
		ins := mustRun(t, 0, "inspect", "--db", db, "--key", key, "--json").stdout
		if s := status(t, ins, "d"); s["used"] != want || s["key"] != nil {
			t.Errorf("inspect --key %s: default limit %v; want used %v, key null", key, s, want)
		}
	}
	r = mustRun(t, 3, "check", "--db", db, "--key", "a", "--tokens", "41", "--json")
	if b := decode(t, r.stdout)["breach"].(map[string]any); b["id"] != "d" {
		t.Errorf("check a 41 over the default: got %s; want breach d", r.stdout)
	}
	mustRun(t, 0, "check", "--db", db, "--key", "b", "--tokens", "41")
	// An own limit of the same shape takes the default's place.
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "a", "--limit", "1000", "--window", "daily", "--id", "own")
	mustRun(t, 0, "check", "--db", db, "--key", "a", "--tokens", "41")
	var ls struct{ Limits []map[string]any }
	if err := json.Unmarshal([]byte(mustRun(t, 0, "limit", "ls", "--db", db, "--json").stdout), &ls); err != nil {
		t.Fatal(err)
	}
	if len(ls.Limits) != 2 || ls.Limits[0]["id"] != "d" || ls.Limits[0]["key"] != nil || ls.Limits[1]["id"] != "own" {
		t.Errorf("limit ls: got %v; want the default first (null key), then own", ls.Limits)
	}
	if out := mustRun(t, 0, "limit", "ls", "--db", db).stdout; !strings.Contains(out, "(default)") {
		t.Errorf("limit ls table: got %q; want the default marked", out)
	}
	mustRun(t, 0, "verify", "--db", db)
}

// key add and limit set warn on stderr, keeping stdout the answer alone.
func TestUnlimitedAndMisspeltKeyWarnings(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	r := mustRun(t, 0, "key", "add", "--db", db, "intern-app", "--json")
	if v := decode(t, r.stdout); v["name"] != "intern-app" || !strings.HasPrefix(v["secret"].(string), "tbk_") {
		t.Errorf("key add --json stdout: got %q", r.stdout)
	}
	if !strings.Contains(r.stderr, "warning") || !strings.Contains(r.stderr, "unlimited") {
		t.Errorf("key add of an unlimited key: stderr %q; want a warning", r.stderr)
	}
	r = mustRun(t, 0, "limit", "set", "--db", db, "--key", "intern-ap", "--limit", "10", "--window", "1h")
	if !strings.Contains(r.stderr, `no gateway key is named "intern-ap"`) || strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("limit set on a misspelt key: stdout %q stderr %q; want the id, and a warning", r.stdout, r.stderr)
	}
	r = mustRun(t, 0, "limit", "set", "--db", db, "--key", "intern-app", "--limit", "10", "--window", "1h")
	if r.stderr != "" {
		t.Errorf("limit set on a gateway key: stderr %q; want none", r.stderr)
	}
	mustRun(t, 0, "limit", "set", "--db", db, "--default", "--limit", "10", "--window", "1h")
	if r := mustRun(t, 0, "key", "add", "--db", db, "second"); strings.Contains(r.stderr, "warning") {
		t.Errorf("key add with a default limit in place: stderr %q; want no warning", r.stderr)
	}
}
