package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// reserveDB has a tokens limit of 100 per hour on gpt-4o and a global
// concurrent limit of 2 for key demo, and nothing used.
func reserveDB(t *testing.T) string {
	t.Helper()
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "demo", "--scope", "model", "--value", "gpt-4o", "--limit", "100", "--window", "1h", "--id", "gpt")
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "demo", "--metric", "concurrent", "--limit", "2", "--id", "conc")
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "demo", "--scope", "provider", "--value", "anthropic", "--limit", "5", "--window", "1h", "--id", "anth")
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "demo", "--limit", "1", "--window", "1m", "--id", "off", "--disabled")
	return db
}

// status is limit id's status in an inspect --json output.
func status(t *testing.T, inspectJSON, id string) map[string]any {
	t.Helper()
	for _, l := range decode(t, inspectJSON)["limits"].([]any) {
		if l := l.(map[string]any); l["id"] == id {
			return l
		}
	}
	t.Fatalf("inspect has no limit %s:\n%s", id, inspectJSON)
	return nil
}

func TestReserveJSON(t *testing.T) {
	t.Parallel()
	db := reserveDB(t)
	v := decode(t, mustRun(t, 0, "reserve", "--db", db, "--key", "demo", "--provider", "openai", "--model", "gpt-4o", "--tokens", "30", "--json").stdout)
	wantKeys(t, "reserve --json", v, "id", "expires_at", "limits")
	if id, _ := v["id"].(string); !strings.HasPrefix(id, "rsv_") {
		t.Errorf("reserve --json id: got %v; want rsv_...", v["id"])
	}
	if want := ts(testNow.Add(2 * time.Minute)); v["expires_at"] != want {
		t.Errorf("expires_at with the default TTL: got %v; want %s", v["expires_at"], want)
	}
	// One hold per applicable enabled limit, in listing order; a lease (1)
	// on the concurrent one.
	var holds []string
	for _, h := range v["limits"].([]any) {
		wantKeys(t, "reserve --json limit", h, "limit_id", "amount")
		h := h.(map[string]any)
		holds = append(holds, h["limit_id"].(string)+"="+itoa(int64(h["amount"].(float64))))
	}
	if got, want := strings.Join(holds, " "), "conc=1 gpt=30"; got != want {
		t.Errorf("reserve --json limits: got %s; want %s", got, want)
	}

	v = decode(t, mustRun(t, 0, "reserve", "--db", db, "--key", "demo", "--model", "gpt-4o", "--tokens", "5", "--ttl", "90s", "--json").stdout)
	if want := ts(testNow.Add(90 * time.Second)); v["expires_at"] != want {
		t.Errorf("expires_at with --ttl 90s: got %v; want %s", v["expires_at"], want)
	}
	ins := mustRun(t, 0, "inspect", "--db", db, "--json").stdout
	if gpt := status(t, ins, "gpt"); gpt["used"] != 0.0 || gpt["reserved"] != 35.0 || gpt["remaining"] != 65.0 {
		t.Errorf("gpt after two reservations: got %v; want used 0, reserved 35, remaining 65", gpt)
	}
	if conc := status(t, ins, "conc"); conc["used"] != 2.0 || conc["reserved"] != 0.0 || conc["remaining"] != 0.0 {
		t.Errorf("conc after two reservations: got %v; want used 2 (live leases), reserved 0", conc)
	}

	// Without --json: the id alone. A key without limits holds nothing.
	r := mustRun(t, 0, "reserve", "--db", db, "--key", "nobody", "--tokens", "5")
	if id := strings.TrimSpace(r.stdout); !strings.HasPrefix(id, "rsv_") || strings.ContainsAny(id, " \n") {
		t.Errorf("reserve: got stdout %q; want one id", r.stdout)
	}
	v = decode(t, mustRun(t, 0, "reserve", "--db", db, "--key", "nobody", "--tokens", "5", "--json").stdout)
	if l, ok := v["limits"].([]any); !ok || len(l) != 0 {
		t.Errorf("reserve for a key without limits: got limits %v; want []", v["limits"])
	}
}

// TestReserveRefused: a refusal exits 3, holds nothing, and prints what
// check prints for the same request at the same instant.
func TestReserveRefused(t *testing.T) {
	t.Parallel()
	db := reserveDB(t)
	mustRun(t, 0, "reserve", "--db", db, "--key", "demo", "--model", "gpt-4o", "--tokens", "60")
	before := mustRun(t, 0, "inspect", "--db", db, "--json").stdout

	req := []string{"--db", db, "--key", "demo", "--provider", "openai", "--model", "gpt-4o", "--tokens", "60", "--json"}
	r := mustRun(t, 3, append([]string{"reserve"}, req...)...)
	if r.stderr != "" {
		t.Errorf("a refusal is not an error: got stderr %q", r.stderr)
	}
	v := decode(t, r.stdout)
	wantKeys(t, "reserve refusal", v, "allowed", "breach", "parked", "limits")
	b, _ := v["breach"].(map[string]any)
	wantKeys(t, "reserve refusal breach", b, slices.Concat(statusFields, []string{"retry_after_seconds", "retryable"})...)
	if v["allowed"] != false || v["parked"] != nil || b["id"] != "gpt" || b["reserved"] != 60.0 || b["retryable"] != true ||
		b["retry_after_seconds"] != 3600.0 {
		t.Errorf("reserve over budget: got %s", r.stdout)
	}
	if c := mustRun(t, 3, append([]string{"check"}, req...)...).stdout; r.stdout != c {
		t.Errorf("reserve refusal differs from check:\nreserve %s\ncheck %s", r.stdout, c)
	}
	if after := mustRun(t, 0, "inspect", "--db", db, "--json").stdout; after != before {
		t.Errorf("a refused reserve held something:\nbefore %s\nafter %s", before, after)
	}

	// An estimate over the limit itself is not retryable.
	v = decode(t, mustRun(t, 3, "reserve", "--db", db, "--key", "demo", "--model", "gpt-4o", "--tokens", "101", "--json").stdout)
	if b := v["breach"].(map[string]any); b["retryable"] != false {
		t.Errorf("estimate over the limit: got retryable %v; want false", b["retryable"])
	}
	// As text: check's report.
	r = mustRun(t, 3, "reserve", "--db", db, "--key", "demo", "--model", "gpt-4o", "--tokens", "41")
	if !strings.HasPrefix(r.stdout, "refused") || !strings.Contains(r.stdout, "limit gpt") || !strings.Contains(r.stdout, "reserved 60") {
		t.Errorf("reserve text when refused: got %q", r.stdout)
	}
	// What is left still fits.
	mustRun(t, 0, "reserve", "--db", db, "--key", "demo", "--model", "gpt-4o", "--tokens", "40")
}

func TestReserveParked(t *testing.T) {
	t.Parallel()
	db := reserveDB(t)
	mustRun(t, 0, "provider", "park", "anthropic", "--db", db, "--kind", "overloaded", "--retry-after", "10m", "--at", "2026-03-02T11:55:00Z")
	before := mustRun(t, 0, "inspect", "--db", db, "--json").stdout
	req := []string{"--db", db, "--key", "demo", "--provider", "anthropic", "--model", "claude", "--tokens", "3", "--json"}
	r := mustRun(t, 3, append([]string{"reserve"}, req...)...)
	v := decode(t, r.stdout)
	wantKeys(t, "reserve refusal", v, "allowed", "breach", "parked", "limits")
	p, _ := v["parked"].(map[string]any)
	wantKeys(t, "reserve refusal parked", p, "provider", "kind", "parked_at", "resume_at", "probe_failures", "retry_after_seconds")
	if v["allowed"] != false || v["breach"] != nil || p["provider"] != "anthropic" || p["kind"] != "overloaded" ||
		p["retry_after_seconds"] != 300.0 || len(v["limits"].([]any)) != 2 {
		t.Errorf("reserve for a parked provider: got %s", r.stdout)
	}
	if c := mustRun(t, 3, append([]string{"check"}, req...)...).stdout; r.stdout != c {
		t.Errorf("reserve refusal differs from check:\nreserve %s\ncheck %s", r.stdout, c)
	}
	if after := mustRun(t, 0, "inspect", "--db", db, "--json").stdout; after != before {
		t.Errorf("a refused reserve held something:\nbefore %s\nafter %s", before, after)
	}
	// Parked and over budget at once: both are filled.
	v = decode(t, mustRun(t, 3, "reserve", "--db", db, "--key", "demo", "--provider", "anthropic", "--tokens", "6", "--json").stdout)
	if b, _ := v["breach"].(map[string]any); v["parked"] == nil || b["id"] != "anth" {
		t.Errorf("reserve for a parked provider over budget: got %v; want breach anth and parked", v)
	}
	// Past resume-at it flows again.
	mustRunAt(t, testNow.Add(5*time.Minute), 0, "reserve", "--db", db, "--key", "demo", "--provider", "anthropic", "--tokens", "3")
}

// TestReserveConcurrent: a concurrent limit takes no window and counts the
// live leases; a lease is freed by release.
func TestReserveConcurrent(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	v := decode(t, mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--metric", "concurrent", "--limit", "2", "--json").stdout)
	if v["metric"] != "concurrent" || v["window"] != nil || v["limit"] != 2.0 {
		t.Fatalf("limit set --metric concurrent: got %v", v)
	}
	id := v["id"].(string)
	first := strings.TrimSpace(mustRun(t, 0, "reserve", "--db", db, "--key", "k", "--tokens", "1000").stdout)
	mustRun(t, 0, "reserve", "--db", db, "--key", "k", "--tokens", "1")
	r := mustRun(t, 3, "reserve", "--db", db, "--key", "k", "--tokens", "1", "--json")
	b := decode(t, r.stdout)["breach"].(map[string]any)
	// Waits for the earliest lease expiry, at most 5 s.
	if b["id"] != id || b["used"] != 2.0 || b["remaining"] != 0.0 || b["retry_after_seconds"] != 5.0 || b["retryable"] != true {
		t.Errorf("third reservation against 2 leases: got %s", r.stdout)
	}
	ins := mustRun(t, 0, "inspect", "--db", db, "--json").stdout
	if s := status(t, ins, id); s["used"] != 2.0 || s["reserved"] != 0.0 || s["window_start"] != nil {
		t.Errorf("concurrent status with 2 leases: got %v", s)
	}
	if txt := mustRun(t, 0, "inspect", "--db", db, "--wide").stdout; !strings.Contains(txt, "concurrent  -       2      2     0         0") {
		t.Errorf("inspect text with 2 leases:\n%s", txt)
	}
	mustRun(t, 0, "release", "--db", db, first)
	mustRun(t, 0, "reserve", "--db", db, "--key", "k", "--tokens", "1")
	// A lease that expired is free, though no recovery ran.
	mustRunAt(t, testNow.Add(2*time.Minute), 0, "reserve", "--db", db, "--key", "k", "--tokens", "1")
}

func TestReserveBadInput(t *testing.T) {
	t.Parallel()
	existing := reserveDB(t)
	before := mustRun(t, 0, "inspect", "--db", existing, "--json").stdout
	for _, tc := range []struct {
		args         []string
		field, value string
	}{
		{[]string{"--key", "demo"}, "tokens", "0"},
		{[]string{"--key", "demo", "--tokens", "0"}, "tokens", "0"},
		{[]string{"--key", "demo", "--tokens", "-5"}, "tokens", "-5"},
		{[]string{"--key", "demo", "--tokens", "9007199254740992"}, "tokens", "9007199254740992"},
		{[]string{"--key", "demo", "--tokens", "many"}, "tokens", "many"},
		{[]string{"--key", "", "--tokens", "5"}, "key", `""`},
		{[]string{"--key", "demo", "--tokens", "5", "--ttl", "0s"}, "ttl", "0s"},
		{[]string{"--key", "demo", "--tokens", "5", "--ttl", "-1m"}, "ttl", "-1m"},
		{[]string{"--key", "demo", "--tokens", "5", "--ttl", "soon"}, "ttl", "soon"},
		{[]string{"--key", "demo", "--tokens", "5", "--at", "2026-03-02T12:00:00Z"}, "at", ""}, // the real clock: no --at
		{[]string{"--key", "demo", "--tokens", "5", "extra"}, "extra", ""},
	} {
		fresh := tempDB(t)
		r := run(t, append([]string{"reserve", "--db", fresh}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.field) || !strings.Contains(r.stderr, tc.value) {
			t.Errorf("reserve %q: got %v; want exit 2 naming %s and %s", tc.args, r, tc.field, tc.value)
		}
		if exists(fresh) {
			t.Errorf("reserve %q created the database", tc.args)
		}
		mustRun(t, 2, append([]string{"reserve", "--db", existing}, tc.args...)...)
	}
	if after := mustRun(t, 0, "inspect", "--db", existing, "--json").stdout; after != before {
		t.Errorf("bad input held something:\nbefore %s\nafter %s", before, after)
	}
}
