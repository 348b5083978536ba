package main

import (
	"strings"
	"testing"
)

// userStatuses are the statuses of per-user limit id in inspect --json
// output, by user.
func userStatuses(t *testing.T, inspectJSON, id string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, l := range decode(t, inspectJSON)["limits"].([]any) {
		if l := l.(map[string]any); l["id"] == id {
			u, ok := l["user"].(string)
			if !ok {
				t.Fatalf("a status of per-user limit %s without a user: %v", id, l)
			}
			out[u] = l
		}
	}
	return out
}

// TestEachUserLimits: a '*' user limit gives each end user their own
// counter; a named user's limit counts that user only.
func TestEachUserLimits(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	v := decode(t, mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--scope", "user", "--value", "*",
		"--limit", "100", "--window", "daily", "--id", "per-user", "--json").stdout)
	if v["scope"] != "user" || v["scope_value"] != "*" {
		t.Errorf("limit set --scope user --value '*': got %v", v)
	}
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--scope", "user", "--value", "carol", "--limit", "10", "--window", "daily", "--id", "carol")
	rec := func(user, input string) {
		mustRun(t, 0, "record", "--db", db, "--key", "k", "--user", user, "--provider", "p", "--model", "m", "--input", input)
	}
	rec("alice", "80")
	rec("bob", "30")
	rec("carol", "5")

	r := mustRun(t, 3, "check", "--db", db, "--key", "k", "--user", "alice", "--tokens", "30", "--json")
	b := decode(t, r.stdout)["breach"].(map[string]any)
	if b["id"] != "per-user" || b["user"] != "alice" || b["used"] != 80.0 || b["scope_value"] != "*" {
		t.Errorf("check alice 30: breach %v; want per-user, alice's counter at 80", b)
	}
	d := decode(t, mustRun(t, 0, "check", "--db", db, "--key", "k", "--user", "bob", "--tokens", "30", "--json").stdout)
	if ls := d["limits"].([]any); len(ls) != 1 || ls[0].(map[string]any)["user"] != "bob" || ls[0].(map[string]any)["used"] != 30.0 {
		t.Errorf("check bob: limits %v; want bob's own counter at 30", ls)
	}
	// A user nobody has seen starts at 0; a request with no user is not
	// under user limits.
	mustRun(t, 0, "check", "--db", db, "--key", "k", "--user", "dave", "--tokens", "100")
	if ls := decode(t, mustRun(t, 0, "check", "--db", db, "--key", "k", "--tokens", "1000", "--json").stdout)["limits"].([]any); len(ls) != 0 {
		t.Errorf("check without --user: got limits %v; want none", ls)
	}
	// carol has both: her named limit (10) and her counter of '*' (100).
	r = mustRun(t, 3, "check", "--db", db, "--key", "k", "--user", "carol", "--tokens", "6", "--json")
	d = decode(t, r.stdout)
	if b := d["breach"].(map[string]any); b["id"] != "carol" || b["user"] != nil {
		t.Errorf("check carol 6: breach %v; want the named limit carol (user null: not a per-user counter)", b)
	}
	if n := len(d["limits"].([]any)); n != 2 {
		t.Errorf("check carol: got %d limits; want 2", n)
	}

	// A reservation holds on its user's counter only.
	mustRunAt(t, testNow, 0, "reserve", "--db", db, "--key", "k", "--user", "bob", "--tokens", "70")
	mustRunAt(t, testNow, 3, "reserve", "--db", db, "--key", "k", "--user", "bob", "--tokens", "1")
	mustRunAt(t, testNow, 0, "reserve", "--db", db, "--key", "k", "--user", "alice", "--tokens", "20")

	ins := mustRun(t, 0, "inspect", "--db", db, "--key", "k", "--json").stdout
	us := userStatuses(t, ins, "per-user")
	if len(us) != 3 || us["alice"]["used"] != 80.0 || us["alice"]["reserved"] != 20.0 || us["bob"]["reserved"] != 70.0 || us["carol"]["used"] != 5.0 {
		t.Errorf("inspect --key k: per-user statuses %v; want alice 80+20, bob 30+70, carol 5", us)
	}
	if s := status(t, ins, "carol"); s["user"] != nil {
		t.Errorf("inspect: the named user limit has user %v; want null", s["user"])
	}
	text := mustRun(t, 0, "inspect", "--db", db, "--key", "k").stdout
	for _, want := range []string{"user=alice (*)", "user=bob (*)", "user=carol  "} {
		if !strings.Contains(text, want) {
			t.Errorf("inspect text: got\n%s\nwant %q", text, want)
		}
	}
	wantNarrow(t, text)
	mustRun(t, 0, "verify", "--db", db)

	// A default '*' limit counts per key and user.
	mustRun(t, 0, "limit", "set", "--db", db, "--default", "--scope", "user", "--value", "*", "--limit", "50", "--window", "daily", "--id", "d-user")
	mustRun(t, 0, "record", "--db", db, "--key", "other", "--user", "alice", "--provider", "p", "--model", "m", "--input", "45")
	r = mustRun(t, 3, "check", "--db", db, "--key", "other", "--user", "alice", "--tokens", "6", "--json")
	if b := decode(t, r.stdout)["breach"].(map[string]any); b["id"] != "d-user" || b["user"] != "alice" || b["used"] != 45.0 {
		t.Errorf("check other alice: breach %v; want d-user for alice at 45", b)
	}
	mustRun(t, 0, "check", "--db", db, "--key", "third", "--user", "alice", "--tokens", "50")

	for _, args := range [][]string{
		{"check", "--key", "k", "--user", "a\x07b"},
		{"record", "--key", "k", "--provider", "p", "--model", "m", "--user", "a\x07b"},
		{"reserve", "--key", "k", "--tokens", "1", "--user", "a\x07b"},
	} {
		fresh := tempDB(t)
		if r := run(t, append(args, "--db", fresh)...); r.code != 2 || !strings.Contains(r.stderr, "user") || exists(fresh) {
			t.Errorf("budget %q: got %v; want exit 2 naming user, no database", args, r)
		}
	}
}

// TestLimitRaise: a raise adds to a limit until --until, then stops
// counting by itself at that instant; the JSON shows limit, base_limit
// and the active raises.
func TestLimitRaise(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--limit", "100", "--window", "daily", "--id", "day")
	mustRun(t, 0, "record", "--db", db, "--key", "k", "--provider", "p", "--model", "m", "--input", "90")
	mustRun(t, 3, "check", "--db", db, "--key", "k", "--tokens", "20")

	until := "2026-03-02T18:00:00Z"
	v := decode(t, mustRun(t, 0, "limit", "raise", "--db", db, "day", "--by", "50", "--until", until, "--json").stdout)
	wantKeys(t, "limit raise --json", v, limitFields...)
	rs := v["raises"].([]any)
	if v["limit"] != 150.0 || v["base_limit"] != 100.0 || len(rs) != 1 {
		t.Fatalf("limit raise --json: got %v; want limit 150, base 100, one raise", v)
	}
	r0 := rs[0].(map[string]any)
	wantKeys(t, "raise", r0, "id", "by", "until", "at")
	if !strings.HasPrefix(r0["id"].(string), "rse_") || r0["by"] != 50.0 || r0["until"] != until || r0["at"] != ts(testNow) {
		t.Errorf("raise: got %v; want by 50 until %s at %s", r0, until, ts(testNow))
	}
	// Without --json: the raise's id only; a raise without --until stays.
	r := mustRun(t, 0, "limit", "raise", "--db", db, "day", "--by", "5")
	if id := strings.TrimSpace(r.stdout); !strings.HasPrefix(id, "rse_") || strings.Contains(id, "\n") {
		t.Errorf("limit raise: got stdout %q; want one raise id", r.stdout)
	}

	mustRun(t, 0, "check", "--db", db, "--key", "k", "--tokens", "65")
	mustRun(t, 0, "check", "--db", db, "--key", "k", "--tokens", "65", "--at", "2026-03-02T17:59:59Z")
	r = mustRun(t, 3, "check", "--db", db, "--key", "k", "--tokens", "65", "--at", until, "--json")
	b := decode(t, r.stdout)["breach"].(map[string]any)
	if b["limit"] != 105.0 || b["base_limit"] != 100.0 || len(b["raises"].([]any)) != 1 || b["raises"].([]any)[0].(map[string]any)["until"] != nil {
		t.Errorf("check at --until: breach %v; want limit 105, only the lasting raise", b)
	}
	s := status(t, mustRun(t, 0, "inspect", "--db", db, "--at", "2026-03-02T17:00:00Z", "--json").stdout, "day")
	if s["limit"] != 155.0 || s["remaining"] != 65.0 || len(s["raises"].([]any)) != 2 {
		t.Errorf("inspect during the raise: got %v; want limit 155, remaining 65, two raises", s)
	}
	if l := decode(t, mustRun(t, 0, "limit", "ls", "--db", db, "--json").stdout)["limits"].([]any)[0].(map[string]any); l["limit"] != 155.0 || l["base_limit"] != 100.0 {
		t.Errorf("limit ls now: got %v; want limit 155, base 100", l)
	}
	if out := mustRun(t, 0, "limit", "ls", "--db", db).stdout; !strings.Contains(out, "155 (base 100)") {
		t.Errorf("limit ls text: got\n%s\nwant 155 (base 100)", out)
	}
	if out := mustRun(t, 0, "inspect", "--db", db).stdout; !strings.Contains(out, "90/155") {
		t.Errorf("inspect text: got\n%s\nwant 90/155", out)
	}

	// Raises of a tokens limit go up to 2^53-1, past what dollars can say.
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "big", "--limit", "100", "--window", "daily", "--id", "big")
	if v := decode(t, mustRun(t, 0, "limit", "raise", "--db", db, "big", "--by", "10000000000", "--json").stdout); v["limit"] != 10_000_000_100.0 {
		t.Errorf("limit raise --by 10000000000: got %v; want limit 10000000100", v)
	}

	// A usd limit is raised in dollars; the JSON counts micro-dollars.
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--metric", "usd", "--limit", "5", "--window", "monthly", "--id", "usd")
	v = decode(t, mustRun(t, 0, "limit", "raise", "--db", db, "usd", "--by", "2.50", "--json").stdout)
	if v["limit"] != 7_500_000.0 || v["base_limit"] != 5_000_000.0 || v["raises"].([]any)[0].(map[string]any)["by"] != 2_500_000.0 {
		t.Errorf("limit raise of a usd limit by 2.50: got %v; want limit 7500000, by 2500000", v)
	}
}

// TestLimitRaiseBadInput: exit 2 naming the field, nothing written; an
// unknown limit is invalid input naming id.
func TestLimitRaiseBadInput(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--limit", "100", "--window", "daily", "--id", "day")
	before := mustRun(t, 0, "limit", "ls", "--db", db, "--json").stdout
	for _, tc := range []struct {
		args         []string
		field, value string
	}{
		{[]string{"nope", "--by", "5"}, "id", "nope"},
		{[]string{"day"}, "by", `""`},
		{[]string{"day", "--by", "0"}, "by", "0"},
		{[]string{"day", "--by", "-5"}, "by", "-5"},
		{[]string{"day", "--by", "ten"}, "by", "ten"},
		{[]string{"day", "--by", "1.5"}, "by", "1.5"}, // a tokens limit takes whole numbers
		{[]string{"day", "--by", "9007199254740992"}, "by", "9007199254740992"},
		{[]string{"day", "--by", "5", "--until", "2026-03-02T11:00:00Z"}, "until", "2026-03-02T11:00:00Z"},
		{[]string{"day", "--by", "5", "--until", "2026-03-02T12:00:00Z"}, "until", "2026-03-02T12:00:00Z"},
		{[]string{"day", "--by", "5", "--until", "tomorrow"}, "until", "tomorrow"},
		{[]string{" ", "--by", "5"}, "id", " "},
	} {
		r := run(t, append([]string{"limit", "raise", "--db", db}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.field) || !strings.Contains(r.stderr, tc.value) {
			t.Errorf("limit raise %q: got %v; want exit 2 naming %s and %s", tc.args, r, tc.field, tc.value)
		}
	}
	if after := mustRun(t, 0, "limit", "ls", "--db", db, "--json").stdout; after != before {
		t.Errorf("bad raises changed the limits:\nbefore %s\nafter %s", before, after)
	}
}

// TestOnceLimit: a once window never resets (reset_at null) and a raise
// tops it up.
func TestOnceLimit(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	v := decode(t, mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--limit", "100", "--window", "once", "--id", "balance", "--json").stdout)
	if v["window"] != "once" || v["reset_time"] != nil || v["timezone"] != nil {
		t.Errorf("limit set --window once: got %v; want window once, no reset time or zone", v)
	}
	mustRun(t, 0, "record", "--db", db, "--key", "k", "--provider", "p", "--model", "m", "--input", "70", "--at", "2026-03-02T13:00:00Z")
	mustRun(t, 0, "record", "--db", db, "--key", "k", "--provider", "p", "--model", "m", "--input", "20", "--at", "2026-09-30T13:00:00Z")
	// A year on, the balance has not reset.
	later := "2027-03-02T12:00:00Z"
	r := mustRun(t, 3, "check", "--db", db, "--key", "k", "--tokens", "11", "--at", later, "--json")
	b := decode(t, r.stdout)["breach"].(map[string]any)
	if b["window"] != "once" || b["reset_at"] != nil || b["used"] != 90.0 || b["window_start"] != ts(testNow) {
		t.Errorf("check a year on: breach %v; want used 90, reset_at null, window_start the limit's creation", b)
	}
	if text := mustRun(t, 0, "inspect", "--db", db, "--at", later).stdout; !strings.Contains(text, "90/100") || !strings.Contains(text, "never") {
		t.Errorf("inspect text of a once limit: got\n%s\nwant 90/100, resets never", text)
	}
	// Before the limit's creation the balance has not started: it covers
	// only what happens from its creation on, so it does not apply then.
	d := decode(t, mustRun(t, 0, "check", "--db", db, "--key", "k", "--at", "2026-03-01T00:00:00Z", "--json").stdout)
	if ls := d["limits"].([]any); len(ls) != 0 || d["allowed"] != true {
		t.Errorf("check before the balance's creation: got %v; want allowed, no limit applying", d)
	}
	// Topped up for good.
	mustRun(t, 0, "limit", "raise", "--db", db, "balance", "--by", "50")
	s := status(t, mustRun(t, 0, "inspect", "--db", db, "--at", later, "--json").stdout, "balance")
	if s["limit"] != 150.0 || s["remaining"] != 60.0 || s["reset_at"] != nil {
		t.Errorf("inspect after a top-up: got %v; want limit 150, remaining 60, reset_at null", s)
	}
	mustRun(t, 0, "check", "--db", db, "--key", "k", "--tokens", "60", "--at", later)
	mustRun(t, 3, "check", "--db", db, "--key", "k", "--tokens", "61", "--at", later)
	mustRun(t, 0, "verify", "--db", db)

	for _, args := range [][]string{
		{"--window", "once", "--tz", "UTC"},
		{"--window", "once", "--reset-time", "09:00"},
	} {
		fresh := tempDB(t)
		r := run(t, append([]string{"limit", "set", "--db", fresh, "--key", "k", "--limit", "1"}, args...)...)
		if r.code != 2 || exists(fresh) {
			t.Errorf("limit set %q: got %v; want exit 2, no database", args, r)
		}
	}
}
