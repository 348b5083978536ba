package main

import (
	"strings"
	"testing"
	"time"
)

// reserve reserves tokens for key demo and model gpt-4o and returns the id.
func reserve(t *testing.T, db, tokens string, extra ...string) string {
	t.Helper()
	args := append([]string{"reserve", "--db", db, "--key", "demo", "--provider", "openai", "--model", "gpt-4o", "--tokens", tokens}, extra...)
	return strings.TrimSpace(mustRun(t, 0, args...).stdout)
}

func TestCommit(t *testing.T) {
	t.Parallel()
	db := reserveDB(t)
	id := reserve(t, db, "50")
	r := mustRun(t, 0, "commit", id, "--db", db, "--input", "30", "--output", "10", "--reasoning", "5", "--cache-read", "20", "--json")
	v := decode(t, r.stdout)
	wantKeys(t, "commit --json", v, "request_id", "expired")
	if v["request_id"] != id || v["expired"] != false {
		t.Errorf("commit --json: got %s; want request_id %s, expired false", r.stdout, id)
	}
	ins := mustRun(t, 0, "inspect", "--db", db, "--json").stdout
	if gpt := status(t, ins, "gpt"); gpt["used"] != 45.0 || gpt["reserved"] != 0.0 {
		t.Errorf("gpt after commit: got %v; want used 45 (input+output+reasoning), reserved 0", gpt)
	}
	if conc := status(t, ins, "conc"); conc["used"] != 0.0 {
		t.Errorf("conc after commit: got %v; want the lease freed", conc)
	}
	// The usage is an event with the reservation's id, key, provider and model.
	dup := decode(t, mustRun(t, 0, "record", "--db", db, "--key", "demo", "--provider", "openai", "--model", "gpt-4o",
		"--input", "1", "--request-id", id, "--json").stdout)
	if dup["duplicate"] != true {
		t.Errorf("record with the committed reservation's id: got %v; want a duplicate", dup)
	}
	mustRun(t, 0, "verify", "--db", db)

	// Settled: a second commit and a release change nothing, exit 4.
	r = mustRun(t, 4, "commit", id, "--db", db, "--input", "99")
	if !strings.Contains(r.stderr, id) || !strings.Contains(r.stderr, "already committed") {
		t.Errorf("second commit: got %v; want it named, already committed", r)
	}
	mustRun(t, 4, "release", id, "--db", db)
	if after := mustRun(t, 0, "inspect", "--db", db, "--json").stdout; after != ins {
		t.Errorf("a second commit changed state:\nbefore %s\nafter %s", ins, after)
	}

	// Larger than the estimate: recorded as it is. Text output is the id.
	id = reserve(t, db, "10")
	if r := mustRun(t, 0, "commit", "--db", db, id, "--input", "40"); r.stdout != id+"\n" {
		t.Errorf("commit: got stdout %q; want the id", r.stdout)
	}
	if gpt := status(t, mustRun(t, 0, "inspect", "--db", db, "--json").stdout, "gpt"); gpt["used"] != 85.0 || gpt["reserved"] != 0.0 {
		t.Errorf("gpt after a commit over the estimate: got %v; want used 85", gpt)
	}
}

// TestCommitLate: a commit after expiry records the usage, in the window
// that admitted the reservation, and says it had expired.
func TestCommitLate(t *testing.T) {
	t.Parallel()
	db := reserveDB(t)
	id := reserve(t, db, "50", "--ttl", "1m")
	later := testNow.Add(2 * time.Hour) // the next hour's window
	v := decode(t, mustRunAt(t, later, 0, "commit", id, "--db", db, "--output", "7", "--json").stdout)
	if v["request_id"] != id || v["expired"] != true {
		t.Errorf("late commit: got %v; want expired true", v)
	}
	if gpt := status(t, mustRun(t, 0, "inspect", "--db", db, "--json").stdout, "gpt"); gpt["used"] != 7.0 || gpt["reserved"] != 0.0 {
		t.Errorf("gpt in the reservation's window after a late commit: got %v; want used 7", gpt)
	}
	mustRunAt(t, later, 4, "commit", id, "--db", db, "--output", "7")

	id = reserve(t, db, "5", "--ttl", "1m")
	r := mustRunAt(t, later, 0, "commit", id, "--db", db, "--output", "1")
	if !strings.HasPrefix(r.stdout, id+" expired") {
		t.Errorf("late commit text: got %q", r.stdout)
	}
}

func TestRelease(t *testing.T) {
	t.Parallel()
	db := reserveDB(t)
	before := mustRun(t, 0, "inspect", "--db", db, "--json").stdout
	id := reserve(t, db, "50")
	if r := mustRun(t, 0, "release", id, "--db", db); r.stdout != id+" released\n" {
		t.Errorf("release: got stdout %q", r.stdout)
	}
	if after := mustRun(t, 0, "inspect", "--db", db, "--json").stdout; after != before {
		t.Errorf("release left something held:\nbefore %s\nafter %s", before, after)
	}
	r := mustRun(t, 4, "release", id, "--db", db)
	if !strings.Contains(r.stderr, "already released") {
		t.Errorf("second release: got %v; want already released", r)
	}
	mustRun(t, 4, "commit", id, "--db", db, "--input", "1")

	// An expired reservation that was never settled releases fine.
	id = reserve(t, db, "50", "--ttl", "1m")
	mustRunAt(t, testNow.Add(2*time.Minute), 0, "release", id, "--db", db)
	mustRunAt(t, testNow.Add(2*time.Minute), 4, "release", id, "--db", db)
}

func TestSettleUnknown(t *testing.T) {
	t.Parallel()
	db := reserveDB(t)
	for _, args := range [][]string{{"commit", "rsv_nope", "--input", "1"}, {"release", "rsv_nope"}} {
		r := mustRun(t, 4, append(args, "--db", db)...)
		if !strings.Contains(r.stderr, "rsv_nope") || !strings.Contains(r.stderr, "not found") {
			t.Errorf("budget %s: got %v; want the id named, not found", strings.Join(args, " "), r)
		}
	}
}

func TestCommitBadInput(t *testing.T) {
	t.Parallel()
	db := reserveDB(t)
	id := reserve(t, db, "50")
	before := mustRun(t, 0, "inspect", "--db", db, "--json").stdout
	for _, tc := range []struct {
		args         []string
		field, value string
	}{
		{[]string{id, "--input", "-1"}, "input", "-1"},
		{[]string{id, "--output", "-2"}, "output", "-2"},
		{[]string{id, "--reasoning", "-3"}, "reasoning", "-3"},
		{[]string{id, "--cache-read", "-4"}, "cache_read", "-4"},
		{[]string{id, "--cache-write", "-5"}, "cache_write", "-5"},
		{[]string{id, "--input", "9007199254740992"}, "input", "9007199254740992"},
		{[]string{id, "--input", "1", "--cache-read", "2"}, "cache_read", "2"},
		{[]string{id, "--input", "lots"}, "input", "lots"},
		{[]string{" "}, "id", `" "`},
		{[]string{}, "reservation id", ""},
	} {
		r := run(t, append([]string{"commit", "--db", db}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.field) || !strings.Contains(r.stderr, tc.value) {
			t.Errorf("commit %q: got %v; want exit 2 naming %s and %s", tc.args, r, tc.field, tc.value)
		}
		// Exit 2 before the database is opened, so even when it is missing.
		fresh := tempDB(t)
		if r := run(t, append([]string{"commit", "--db", fresh}, tc.args...)...); r.code != 2 || exists(fresh) {
			t.Errorf("commit %q on a missing db: got %v; want exit 2, no file", tc.args, r)
		}
	}
	if after := mustRun(t, 0, "inspect", "--db", db, "--json").stdout; after != before {
		t.Errorf("bad input changed state:\nbefore %s\nafter %s", before, after)
	}
	mustRun(t, 2, "release", "--db", db, " ")
	mustRun(t, 0, "commit", id, "--db", db, "--input", "1")
}
