package main

import (
	"strings"
	"testing"
	"time"
)

// TestRecover: recover frees what expired by the clock, once; no other
// command recovers (read-only ones must not write, and the reservation
// commands discount lapsed holds without recovering them).
func TestRecover(t *testing.T) {
	t.Parallel()
	db := reserveDB(t)
	short := reserve(t, db, "30", "--ttl", "1m")
	reserve(t, db, "20", "--ttl", "5m")
	later := testNow.Add(2 * time.Minute)

	// The short one stopped counting at its expiry, though nothing recovered it.
	ins := mustRunAt(t, later, 0, "inspect", "--db", db, "--json").stdout
	if gpt := status(t, ins, "gpt"); gpt["reserved"] != 20.0 {
		t.Errorf("gpt after one reservation expired: got %v; want reserved 20", gpt)
	}
	if conc := status(t, ins, "conc"); conc["used"] != 1.0 {
		t.Errorf("conc after one reservation expired: got %v; want used 1 (one live lease)", conc)
	}
	for _, args := range [][]string{
		{"check", "--key", "demo", "--model", "gpt-4o"},
		{"inspect"},
		{"limit", "ls"},
		{"provider", "ls"},
		{"verify"},
		{"reserve", "--key", "other", "--tokens", "1"},
		{"release", "rsv_unknown"},
	} {
		runAt(t, later, append(args, "--db", db)...)
	}

	r := mustRunAt(t, later, 0, "recover", "--db", db, "--json")
	v := decode(t, r.stdout)
	wantKeys(t, "recover --json", v, "released_reservations", "released_leases")
	if v["released_reservations"] != 1.0 || v["released_leases"] != 1.0 {
		t.Errorf("recover after one reservation expired: got %s; want 1 reservation, 1 lease", r.stdout)
	}
	v = decode(t, mustRunAt(t, later, 0, "recover", "--db", db, "--json").stdout)
	if v["released_reservations"] != 0.0 || v["released_leases"] != 0.0 {
		t.Errorf("second recover: got %v; want nothing left to free", v)
	}
	if after := mustRunAt(t, later, 0, "inspect", "--db", db, "--json").stdout; after != ins {
		t.Errorf("recover changed what counts:\nbefore %s\nafter %s", ins, after)
	}

	// A recovered reservation is still committable: a late commit.
	v = decode(t, mustRunAt(t, later, 0, "commit", short, "--db", db, "--input", "12", "--json").stdout)
	if v["expired"] != true {
		t.Errorf("commit of a recovered reservation: got %v; want expired true", v)
	}
	if gpt := status(t, mustRunAt(t, later, 0, "inspect", "--db", db, "--json").stdout, "gpt"); gpt["used"] != 12.0 {
		t.Errorf("gpt after committing a recovered reservation: got %v; want used 12", gpt)
	}

	// The 5m one, and the one for key other (no limits, so no lease).
	r = mustRunAt(t, testNow.Add(10*time.Minute), 0, "recover", "--db", db)
	if !strings.HasPrefix(r.stdout, "released 2 expired reservations (1 concurrency leases)") {
		t.Errorf("recover text: got %q", r.stdout)
	}
	mustRun(t, 2, "recover", "--db", db, "--at", "2026-03-02T12:00:00Z") // the real clock: no --at
}
