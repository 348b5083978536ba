package main

import (
	"slices"
	"strings"
	"testing"
)

func checkDB(t *testing.T) string {
	t.Helper()
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "demo", "--limit", "1000", "--window", "daily", "--id", "day")
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "demo", "--scope", "model", "--value", "gpt-4o", "--limit", "100", "--window", "1h", "--id", "gpt")
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "demo", "--scope", "provider", "--value", "anthropic", "--limit", "5", "--window", "1h", "--id", "anth")
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "demo", "--metric", "concurrent", "--limit", "2", "--id", "conc")
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "demo", "--limit", "1", "--window", "1m", "--id", "off", "--disabled")
	mustRun(t, 0, "record", "--db", db, "--key", "demo", "--provider", "openai", "--model", "gpt-4o", "--input", "60", "--output", "10",
		"--request-id", "r1", "--at", "2026-03-02T09:30:00Z")
	return db
}

func TestCheckAllowed(t *testing.T) {
	t.Parallel()
	db := checkDB(t)
	r := mustRun(t, 0, "check", "--db", db, "--key", "demo", "--provider", "openai", "--model", "gpt-4o", "--tokens", "30", "--at", "2026-03-02T09:40:00Z", "--json")
	v := decode(t, r.stdout)
	wantKeys(t, "check --json", v, "allowed", "breach", "parked", "limits")
	if v["allowed"] != true || v["breach"] != nil || v["parked"] != nil {
		t.Errorf("check within budget: got %s", r.stdout)
	}
	var ids []string
	for _, l := range v["limits"].([]any) {
		wantKeys(t, "check --json limit status", l, statusFields...)
		ids = append(ids, l.(map[string]any)["id"].(string))
	}
	// Applicable enabled limits only: not the anthropic one, not the disabled one.
	if got := strings.Join(ids, " "); got != "conc day gpt" {
		t.Errorf("applicable limits: got %s; want conc day gpt", got)
	}
	conc := v["limits"].([]any)[0].(map[string]any)
	if conc["window"] != nil || conc["window_start"] != nil || conc["reset_at"] != nil || conc["reset_time"] != nil || conc["timezone"] != nil {
		t.Errorf("concurrent status: got %v; want null window fields", conc)
	}
	gpt := v["limits"].([]any)[2].(map[string]any)
	if gpt["used"] != 70.0 || gpt["remaining"] != 30.0 || gpt["window_start"] != "2026-03-02T09:00:00Z" || gpt["reset_at"] != "2026-03-02T10:00:00Z" {
		t.Errorf("gpt status: got %v", gpt)
	}

	r = mustRun(t, 0, "check", "--db", db, "--key", "demo", "--model", "gpt-4o", "--at", "2026-03-02T09:40:00Z")
	if !strings.HasPrefix(r.stdout, "allowed") || !strings.Contains(r.stdout, "REMAINING") {
		t.Errorf("check text: got %q", r.stdout)
	}
	// A key without limits is allowed, with an empty list.
	v = decode(t, mustRun(t, 0, "check", "--db", db, "--key", "nobody", "--json").stdout)
	if l, ok := v["limits"].([]any); v["allowed"] != true || !ok || len(l) != 0 {
		t.Errorf("check of a key without limits: got %v; want allowed, limits []", v)
	}
}

func TestCheckRefused(t *testing.T) {
	t.Parallel()
	db := checkDB(t)
	r := mustRun(t, 3, "check", "--db", db, "--key", "demo", "--provider", "openai", "--model", "gpt-4o", "--tokens", "31", "--at", "2026-03-02T09:40:00Z", "--json")
	v := decode(t, r.stdout)
	b, _ := v["breach"].(map[string]any)
	wantKeys(t, "breach", b, slices.Concat(statusFields, []string{"retry_after_seconds", "retryable"})...)
	if v["allowed"] != false || b["id"] != "gpt" || b["scope"] != "model" || b["retry_after_seconds"] != 1200.0 || b["retryable"] != true {
		t.Errorf("check over budget: got %s", r.stdout)
	}
	if r.stderr != "" {
		t.Errorf("a refusal is not an error: got stderr %q", r.stderr)
	}
	// An estimate over the limit itself can never pass.
	v = decode(t, mustRun(t, 3, "check", "--db", db, "--key", "demo", "--model", "gpt-4o", "--tokens", "101", "--at", "2026-03-02T09:40:00Z", "--json").stdout)
	if b := v["breach"].(map[string]any); b["retryable"] != false {
		t.Errorf("estimate over the limit: got retryable %v; want false", b["retryable"])
	}
	r = mustRun(t, 3, "check", "--db", db, "--key", "demo", "--model", "gpt-4o", "--tokens", "31", "--at", "2026-03-02T09:40:00Z")
	if !strings.HasPrefix(r.stdout, "refused") || !strings.Contains(r.stdout, "limit gpt") || !strings.Contains(r.stdout, "retry after 1200s") {
		t.Errorf("check text when refused: got %q", r.stdout)
	}
}

func TestCheckParked(t *testing.T) {
	t.Parallel()
	db := checkDB(t)
	mustRun(t, 0, "provider", "park", "anthropic", "--db", db, "--kind", "rate_limited", "--retry-after", "30m", "--at", "2026-03-02T09:30:00Z")
	r := mustRun(t, 3, "check", "--db", db, "--key", "demo", "--provider", "anthropic", "--model", "claude", "--at", "2026-03-02T09:40:00Z", "--json")
	v := decode(t, r.stdout)
	p, _ := v["parked"].(map[string]any)
	wantKeys(t, "parked", p, "provider", "kind", "parked_at", "resume_at", "probe_failures", "retry_after_seconds")
	if v["allowed"] != false || v["breach"] != nil || p["provider"] != "anthropic" || p["kind"] != "rate_limited" ||
		p["parked_at"] != "2026-03-02T09:30:00Z" || p["resume_at"] != "2026-03-02T10:00:00Z" ||
		p["retry_after_seconds"] != 1200.0 || p["probe_failures"] != 0.0 {
		t.Errorf("check of a parked provider: got %s", r.stdout)
	}
	r = mustRun(t, 3, "check", "--db", db, "--key", "demo", "--provider", "anthropic", "--at", "2026-03-02T09:40:00Z")
	if !strings.Contains(r.stdout, "provider anthropic is parked (rate_limited)") {
		t.Errorf("check text of a parked provider: got %q", r.stdout)
	}
	// Past resume-at it stops refusing.
	mustRun(t, 0, "check", "--db", db, "--key", "demo", "--provider", "anthropic", "--at", "2026-03-02T10:00:00Z")
}

// TestCheckWritesNothing: a check of a cold window does not store its seed.
func TestCheckWritesNothing(t *testing.T) {
	t.Parallel()
	db := checkDB(t)
	before := mustRun(t, 0, "inspect", "--db", db, "--at", "2026-03-02T11:00:00Z", "--json").stdout
	mustRun(t, 0, "check", "--db", db, "--key", "demo", "--model", "gpt-4o", "--at", "2026-03-02T11:00:00Z")
	mustRun(t, 0, "verify", "--db", db)
	if after := mustRun(t, 0, "inspect", "--db", db, "--at", "2026-03-02T11:00:00Z", "--json").stdout; after != before {
		t.Errorf("check changed state:\nbefore %s\nafter %s", before, after)
	}
}

func TestCheckBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args         []string
		field, value string
	}{
		{[]string{"--key", ""}, "key", `""`},
		{[]string{"--key", "k", "--tokens", "-1"}, "tokens", "-1"},
		{[]string{"--key", "k", "--tokens", "9007199254740992"}, "tokens", "9007199254740992"},
		{[]string{"--key", "k", "--at", "2026-03-02T25:00:00Z"}, "at", "2026-03-02T25:00:00Z"},
		{[]string{"--key", "k", "--at", "1772442000"}, "at", "1772442000"},
	} {
		// Bad input is exit 2 even when the database is missing.
		db := tempDB(t)
		r := run(t, append([]string{"check", "--db", db}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.field) || !strings.Contains(r.stderr, tc.value) {
			t.Errorf("check %q: got %v; want exit 2 naming %s and %s", tc.args, r, tc.field, tc.value)
		}
		if exists(db) {
			t.Errorf("check %q created the database", tc.args)
		}
	}
}
