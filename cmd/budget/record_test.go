package main

import (
	"strings"
	"testing"
)

func TestRecord(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "demo", "--limit", "1000", "--window", "daily", "--id", "day")
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "demo", "--metric", "output", "--limit", "1000", "--window", "daily", "--id", "out")
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "demo", "--metric", "requests", "--limit", "1000", "--window", "daily", "--id", "req")

	r := mustRun(t, 0, "record", "--db", db, "--key", "demo", "--provider", "openai", "--model", "gpt-4o-mini",
		"--input", "300", "--output", "50", "--reasoning", "20", "--cache-read", "100", "--cache-write", "20",
		"--request-id", "r1", "--at", "2026-03-02T09:00:00Z")
	if r.stdout != "r1\n" {
		t.Errorf("record: got stdout %q; want the request id", r.stdout)
	}
	v := decode(t, mustRun(t, 0, "record", "--db", db, "--key", "demo", "--provider", "openai", "--model", "gpt-4o-mini",
		"--input", "300", "--request-id", "r1", "--at", "2026-03-02T09:00:00Z", "--json").stdout)
	wantKeys(t, "record --json", v, "request_id", "duplicate")
	if v["request_id"] != "r1" || v["duplicate"] != true {
		t.Errorf("record of a known request id: got %v; want duplicate", v)
	}
	// Without --request-id an id is generated; without --at the event is now.
	v = decode(t, mustRun(t, 0, "record", "--db", db, "--key", "demo", "--provider", "openai", "--model", "gpt-4o-mini",
		"--input", "5", "--json").stdout)
	if id, _ := v["request_id"].(string); id == "" || v["duplicate"] != false {
		t.Errorf("record without --request-id: got %v; want a generated id, not a duplicate", v)
	}

	// tokens = input + output + reasoning, each once; output = output +
	// reasoning. The event without --at happened at testNow (12:00), the
	// same day; inspect --at counts what came up to its instant.
	day, out, req := usedAt(t, db, "day", "2026-03-02T23:00:00Z"), usedAt(t, db, "out", "2026-03-02T23:00:00Z"), usedAt(t, db, "req", "2026-03-02T23:00:00Z")
	if day != 375 || out != 70 || req != 2 {
		t.Errorf("used on 2026-03-02: got day %v, out %v, req %v; want 375, 70, 2", day, out, req)
	}
	if u := usedAt(t, db, "day", "2026-03-03T00:00:00Z"); u != 0 {
		t.Errorf("used on 2026-03-03: got %v; want 0", u)
	}
}

// TestRecordBadInput: exit 2, the field and the value named, no database created.
func TestRecordBadInput(t *testing.T) {
	t.Parallel()
	ok := []string{"--key", "k", "--provider", "p", "--model", "m"}
	for _, tc := range []struct {
		args         []string
		field, value string
	}{
		{append(ok, "--input", "-1"), "input", "-1"},
		{append(ok, "--output", "-2"), "output", "-2"},
		{append(ok, "--reasoning", "-3"), "reasoning", "-3"},
		{append(ok, "--input", "5", "--cache-read", "-1"), "cache_read", "-1"},
		{append(ok, "--input", "9007199254740992"), "input", "9007199254740992"},
		{append(ok, "--output", "99999999999999999999"), "output", "99999999999999999999"},
		{append(ok, "--input", "12.5"), "input", "12.5"},
		{append(ok, "--input", "10", "--cache-read", "8", "--cache-write", "3"), "cache_read+cache_write", "11"},
		{append(ok, "--input", "9007199254740991", "--output", "1"), "input+output+reasoning", "9007199254740992"},
		{append(ok, "--at", "2026-03-02"), "at", "2026-03-02"},
		{append(ok, "--at", "yesterday"), "at", "yesterday"},
		{[]string{"--key", "", "--provider", "p", "--model", "m"}, "key", `""`},
		{[]string{"--key", "k", "--model", "m"}, "provider", `""`},
		{[]string{"--key", "k", "--provider", "p", "--model", " "}, "model", `""`},
	} {
		db := tempDB(t)
		r := run(t, append([]string{"record", "--db", db}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.field) || !strings.Contains(r.stderr, tc.value) {
			t.Errorf("record %q: got %v; want exit 2 naming %s and %s", tc.args, r, tc.field, tc.value)
		}
		if exists(db) {
			t.Errorf("record %q created the database", tc.args)
		}
	}
}
