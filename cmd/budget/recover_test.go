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
	wantKeys(t, "recover --json", v, "released_reservations", "released_leases", "charged_reservations")
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

// A charge reservation keeps counting past its expiry until recover charges
// its estimate; a commit after that records only the excess.
func TestRecoverChargesChargeReservations(t *testing.T) {
	t.Parallel()
	db := reserveDB(t)
	id := reserve(t, db, "30", "--ttl", "1m", "--on-expiry", "charge")
	later := testNow.Add(2 * time.Minute)
	if gpt := status(t, mustRunAt(t, later, 0, "inspect", "--db", db, "--json").stdout, "gpt"); gpt["reserved"] != 30.0 || gpt["used"] != 0.0 {
		t.Errorf("gpt past the expiry of a charge reservation: got %v; want reserved 30, used 0", gpt)
	}
	v := decode(t, mustRunAt(t, later, 0, "recover", "--db", db, "--json").stdout)
	if v["released_reservations"] != 1.0 || v["charged_reservations"] != 1.0 {
		t.Errorf("recover: got %v; want 1 released, 1 charged", v)
	}
	if gpt := status(t, mustRunAt(t, later, 0, "inspect", "--db", db, "--json").stdout, "gpt"); gpt["reserved"] != 0.0 || gpt["used"] != 30.0 {
		t.Errorf("gpt after recovery: got %v; want used 30 (the estimate), reserved 0", gpt)
	}
	v = decode(t, mustRunAt(t, later, 0, "commit", id, "--db", db, "--input", "25", "--output", "9", "--json").stdout)
	if v["expired"] != true || v["request_id"] != id {
		t.Errorf("late commit after the charge: got %v; want expired true", v)
	}
	if gpt := status(t, mustRunAt(t, later, 0, "inspect", "--db", db, "--json").stdout, "gpt"); gpt["used"] != 34.0 {
		t.Errorf("gpt after the late commit: got %v; want used 34 (30 charged + 4 over)", gpt)
	}
	mustRun(t, 0, "verify", "--db", db)
	r := mustRun(t, 2, "reserve", "--db", db, "--key", "demo", "--tokens", "1", "--on-expiry", "never")
	if !strings.Contains(r.stderr, "on_expiry") {
		t.Errorf("reserve --on-expiry never: stderr %q; want the field named", r.stderr)
	}
}
