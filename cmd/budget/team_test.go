package main

import (
	"slices"
	"strings"
	"testing"
)

// teamsDB has org acme with teams eng (keys a, a gateway key, and b, a
// library key) and ops (key c), and team solo in no org.
func teamsDB(t *testing.T) string {
	t.Helper()
	db := tempDB(t)
	mustRun(t, 0, "team", "set", "--db", db, "eng", "--org", "acme")
	mustRun(t, 0, "team", "set", "--db", db, "ops", "--org", "acme")
	mustRun(t, 0, "team", "set", "--db", db, "solo")
	mustRun(t, 0, "key", "add", "--db", db, "a", "--team", "eng")
	mustRun(t, 0, "key", "set-team", "--db", db, "b", "eng")
	mustRun(t, 0, "key", "set-team", "--db", db, "c", "ops")
	return db
}

// teamsJSON is team ls --json: the teams by name.
func teamsJSON(t *testing.T, db string) map[string]map[string]any {
	t.Helper()
	v := decode(t, mustRun(t, 0, "team", "ls", "--db", db, "--json").stdout)
	wantKeys(t, "team ls --json", v, "teams")
	out := map[string]map[string]any{}
	for _, x := range v["teams"].([]any) {
		tm := x.(map[string]any)
		wantKeys(t, "team ls --json team", tm, "name", "org", "keys")
		out[tm["name"].(string)] = tm
	}
	return out
}

func strs(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

func TestTeamSetLsRm(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	if r := mustRun(t, 0, "team", "set", "--db", db, "eng", "--org", "acme"); r.stdout != "eng\n" {
		t.Errorf("team set: got stdout %q; want the team's name", r.stdout)
	}
	if !exists(db) {
		t.Fatal("team set did not create the database")
	}
	v := decode(t, mustRun(t, 0, "team", "set", "--db", db, "solo", "--json").stdout)
	wantKeys(t, "team set --json", v, "name", "org", "keys")
	if v["name"] != "solo" || v["org"] != nil || len(v["keys"].([]any)) != 0 {
		t.Errorf("team set solo --json: got %v; want org null, keys []", v)
	}
	mustRun(t, 0, "key", "add", "--db", db, "app", "--team", "eng")
	mustRun(t, 0, "key", "set-team", "--db", db, "lib-key", "eng") // not a gateway key
	ts := teamsJSON(t, db)
	if got := strs(ts["eng"]["keys"]); !slices.Equal(got, []string{"app", "lib-key"}) || ts["eng"]["org"] != "acme" {
		t.Errorf("team ls: eng is %v; want org acme, keys app and lib-key", ts["eng"])
	}
	text := mustRun(t, 0, "team", "ls", "--db", db).stdout
	for _, want := range []string{"TEAM", "ORG", "KEYS", "eng", "acme", "app, lib-key", "solo"} {
		if !strings.Contains(text, want) {
			t.Errorf("team ls text lacks %q:\n%s", want, text)
		}
	}

	// Moving a team to another org (and out of any).
	v = decode(t, mustRun(t, 0, "team", "set", "--db", db, "eng", "--org", "bigco", "--json").stdout)
	if v["org"] != "bigco" || !slices.Equal(strs(v["keys"]), []string{"app", "lib-key"}) {
		t.Errorf("team set eng --org bigco: got %v; want the team moved with its keys", v)
	}
	mustRun(t, 0, "team", "set", "--db", db, "eng")
	if ts := teamsJSON(t, db); ts["eng"]["org"] != nil {
		t.Errorf("team set eng without --org: got org %v; want null", ts["eng"]["org"])
	}

	// A key moves between teams, and out of any.
	mustRun(t, 0, "key", "set-team", "--db", db, "lib-key", "solo")
	mustRun(t, 0, "key", "set-team", "--db", db, "app", "--none")
	ts = teamsJSON(t, db)
	if len(ts["eng"]["keys"].([]any)) != 0 || !slices.Equal(strs(ts["solo"]["keys"]), []string{"lib-key"}) {
		t.Errorf("after set-team: got %v; want eng empty, solo with lib-key", ts)
	}

	// rm: unknown exits 4; a team with limits exits 2 naming them.
	r := mustRun(t, 4, "team", "rm", "--db", db, "nope")
	if !strings.Contains(r.stderr, "nope") {
		t.Errorf("team rm nope: stderr %q; want it named", r.stderr)
	}
	mustRun(t, 0, "limit", "set", "--db", db, "--team", "solo", "--limit", "10", "--window", "1h", "--id", "solo-hour")
	r = mustRun(t, 2, "team", "rm", "--db", db, "solo")
	if !strings.Contains(r.stderr, "team") || !strings.Contains(r.stderr, "solo-hour") {
		t.Errorf("team rm of a team with limits: stderr %q; want it to name the team and the limit", r.stderr)
	}
	if _, ok := teamsJSON(t, db)["solo"]; !ok {
		t.Fatal("a refused team rm removed the team")
	}
	mustRun(t, 0, "limit", "rm", "--db", db, "solo-hour")
	if r := mustRun(t, 0, "team", "rm", "--db", db, "solo"); r.stdout != "" {
		t.Errorf("team rm: got stdout %q; want none", r.stdout)
	}
	if _, ok := teamsJSON(t, db)["solo"]; ok {
		t.Error("team rm left the team")
	}
	mustRun(t, 0, "team", "rm", "--db", db, "eng")
	if got := mustRun(t, 0, "team", "ls", "--db", db).stdout; got != "no teams\n" {
		t.Errorf("team ls of no teams: got %q", got)
	}
	if got := strings.Join(strings.Fields(mustRun(t, 0, "team", "ls", "--db", db, "--json").stdout), ""); got != `{"teams":[]}` {
		t.Errorf("team ls --json of no teams: got %s", got)
	}
}

// TestTeamBadInput: each bad input exits 2 naming the field and the value,
// and writes nothing: the limits, teams and keys stay as they were, and a
// missing database is not created.
func TestTeamBadInput(t *testing.T) {
	t.Parallel()
	db := teamsDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--team", "eng", "--limit", "100", "--window", "daily", "--id", "eng-day")
	snapshot := func() string {
		return mustRun(t, 0, "limit", "ls", "--db", db, "--json").stdout +
			mustRun(t, 0, "team", "ls", "--db", db, "--json").stdout +
			mustRun(t, 0, "key", "ls", "--db", db, "--json").stdout
	}
	before := snapshot()
	for _, tc := range []struct {
		args         []string
		field, value string
		fresh        bool // also exit 2 on a missing database, which stays missing
	}{
		{[]string{"team", "set", "acme"}, "team", "acme", false},                     // a team named like an org
		{[]string{"team", "set", "new", "--org", "eng"}, "org", "eng", false},        // an org named like a team
		{[]string{"team", "set", "same", "--org", "same"}, "org", "same", true},      // both at once
		{[]string{"team", "set", " "}, "team", " ", true},                            // empty
		{[]string{"team", "set", "bad\tname"}, "team", "bad", true},                  // control character
		{[]string{"key", "add", "new-key", "--team", "nope"}, "team", "nope", true},  // unknown team: no key
		{[]string{"key", "add", "new-key", "--team", "acme"}, "team", "acme", false}, // an org is no team
		{[]string{"key", "set-team", "b", "nope"}, "team", "nope", true},
		{[]string{"key", "set-team", " ", "eng"}, "key", " ", true},
		{[]string{"key", "set-team", "b", " "}, "team", " ", true},
		{[]string{"limit", "set", "--team", "nope", "--limit", "1", "--window", "1h"}, "team", "nope", true},
		{[]string{"limit", "set", "--org", "nope", "--limit", "1", "--window", "1h"}, "org", "nope", true},
		{[]string{"limit", "set", "--org", "eng", "--limit", "1", "--window", "1h"}, "org", "eng", false},
		{[]string{"limit", "set", "--team", "acme", "--limit", "1", "--window", "1h"}, "team", "acme", false},
		{[]string{"limit", "set", "--team", "eng", "--key", "a", "--limit", "1", "--window", "1h"}, "team", "eng", true},
		{[]string{"limit", "set", "--org", "acme", "--key", "a", "--limit", "1", "--window", "1h"}, "org", "acme", true},
		{[]string{"limit", "set", "--team", "eng", "--org", "acme", "--limit", "1", "--window", "1h"}, "org", "acme", true},
		{[]string{"limit", "set", "--team", "eng", "--default", "--limit", "1", "--window", "1h"}, "team", "eng", true},
		{[]string{"limit", "set", "--team", "eng", "--scope", "user", "--value", "al*", "--limit", "1", "--window", "1h"}, "value", "al*", true},
		{[]string{"inspect", "--team", "eng", "--key", "a"}, "team", "eng", false},
		{[]string{"inspect", "--org", "acme", "--key", "a"}, "org", "acme", false},
		{[]string{"inspect", "--org", "acme", "--team", "eng"}, "org", "acme", false},
		{[]string{"inspect", "--team", "nope"}, "team", "nope", false},
		{[]string{"inspect", "--org", "nope"}, "org", "nope", false},
		{[]string{"inspect", "--team", "acme"}, "team", "acme", false},
	} {
		r := run(t, append(tc.args, "--db", db)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.field) || !strings.Contains(r.stderr, tc.value) {
			t.Errorf("budget %q: got %v; want exit 2 naming %s and %q", tc.args, r, tc.field, tc.value)
		}
		if !tc.fresh {
			continue
		}
		fresh := tempDB(t)
		if r := run(t, append(tc.args, "--db", fresh)...); r.code != 2 || exists(fresh) {
			t.Errorf("budget %q on a missing database: got %v (created: %v); want exit 2, no database", tc.args, r, exists(fresh))
		}
	}
	if after := snapshot(); after != before {
		t.Errorf("bad input changed the database:\nbefore %s\nafter %s", before, after)
	}
}

// TestTeamLimitShared: a team limit is one budget for all its keys: what
// one key spends or holds refuses another, via check and reserve, and the
// refusal names the team's level. Each key's own limit holds too.
func TestTeamLimitShared(t *testing.T) {
	t.Parallel()
	db := teamsDB(t)
	v := decode(t, mustRun(t, 0, "limit", "set", "--db", db, "--team", "eng", "--limit", "100", "--window", "daily", "--id", "eng-day", "--json").stdout)
	wantKeys(t, "limit set --team --json", v, limitFields...)
	if v["level"] != "team" || v["owner"] != "eng" || v["key"] != nil {
		t.Errorf("limit set --team eng --json: got %v; want level team, owner eng, key null", v)
	}
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "b", "--limit", "25", "--window", "daily", "--id", "b-day")
	mustRun(t, 0, "record", "--db", db, "--key", "a", "--provider", "p", "--model", "m", "--input", "60")

	// b has 40 of the team's 100 left, though it spent nothing itself.
	mustRun(t, 0, "check", "--db", db, "--key", "b", "--tokens", "20")
	r := mustRun(t, 3, "check", "--db", db, "--key", "b", "--tokens", "30", "--json")
	d := decode(t, r.stdout)
	b := d["breach"].(map[string]any)
	if b["id"] != "b-day" || b["level"] != "key" || b["owner"] != "b" {
		t.Errorf("check b 30: breach %v; want b's own limit (25), the most restrictive", b)
	}
	r = mustRun(t, 3, "check", "--db", db, "--key", "a", "--tokens", "41", "--json")
	b = decode(t, r.stdout)["breach"].(map[string]any)
	if b["id"] != "eng-day" || b["level"] != "team" || b["owner"] != "eng" || b["key"] != nil || b["used"] != 60.0 || b["remaining"] != 40.0 {
		t.Errorf("check a 41: breach %v; want the team limit eng-day, used 60, remaining 40", b)
	}
	if text := mustRun(t, 3, "check", "--db", db, "--key", "a", "--tokens", "41").stdout; !strings.Contains(text, "team:eng") {
		t.Errorf("check text: got\n%s\nwant the breach's owner team:eng", text)
	}

	// A reservation of b holds on the team: a's reserve then finds 20 left.
	mustRunAt(t, testNow, 0, "reserve", "--db", db, "--key", "b", "--tokens", "20")
	r = mustRunAt(t, testNow, 3, "reserve", "--db", db, "--key", "a", "--tokens", "21", "--json")
	b = decode(t, r.stdout)["breach"].(map[string]any)
	if b["level"] != "team" || b["owner"] != "eng" || b["reserved"] != 20.0 {
		t.Errorf("reserve a 21: breach %v; want the team limit with b's 20 reserved", b)
	}
	mustRunAt(t, testNow, 0, "reserve", "--db", db, "--key", "a", "--tokens", "20")
	mustRun(t, 3, "check", "--db", db, "--key", "b", "--tokens", "1")
	// A key of another team is not bound by it.
	mustRun(t, 0, "check", "--db", db, "--key", "c", "--tokens", "1000")

	// inspect --team shows only the team's own limit, with its usage.
	ins := mustRun(t, 0, "inspect", "--db", db, "--team", "eng", "--json").stdout
	ls := decode(t, ins)["limits"].([]any)
	if len(ls) != 1 {
		t.Fatalf("inspect --team eng: got %d limits; want 1:\n%s", len(ls), ins)
	}
	s := ls[0].(map[string]any)
	wantKeys(t, "inspect --team limit", s, statusFields...)
	if s["id"] != "eng-day" || s["used"] != 60.0 || s["reserved"] != 40.0 || s["remaining"] != 0.0 || s["user"] != nil {
		t.Errorf("inspect --team eng: got %v; want used 60, reserved 40", s)
	}
	// inspect --key a shows a's limits with its team's.
	ins = mustRun(t, 0, "inspect", "--db", db, "--key", "a", "--json").stdout
	if s := status(t, ins, "eng-day"); s["level"] != "team" {
		t.Errorf("inspect --key a: the team limit is %v", s)
	}
	// Text outputs name the level where the key was.
	for _, args := range [][]string{{"inspect", "--team", "eng"}, {"inspect", "--wide"}, {"limit", "ls"}} {
		out := mustRun(t, 0, append(args, "--db", db)...).stdout
		if !strings.Contains(out, "OWNER") || !strings.Contains(out, "team:eng") {
			t.Errorf("budget %s: got\n%s\nwant an OWNER column with team:eng", strings.Join(args, " "), out)
		}
		if args[0] == "inspect" && args[1] != "--wide" {
			wantNarrow(t, out)
		}
	}
	mustRun(t, 0, "verify", "--db", db)
}

// TestOrgLimitBindsTeams: an org limit is shared by the keys of all its
// teams; the refusal names the org.
func TestOrgLimitBindsTeams(t *testing.T) {
	t.Parallel()
	db := teamsDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--org", "acme", "--metric", "requests", "--limit", "3", "--window", "1h", "--id", "acme-req")
	mustRun(t, 0, "limit", "set", "--db", db, "--team", "eng", "--metric", "requests", "--limit", "10", "--window", "1h", "--id", "eng-req")
	for _, key := range []string{"a", "b"} { // team eng
		mustRun(t, 0, "record", "--db", db, "--key", key, "--provider", "p", "--model", "m", "--input", "1")
	}
	mustRun(t, 0, "check", "--db", db, "--key", "c") // team ops: one request left
	mustRun(t, 0, "record", "--db", db, "--key", "c", "--provider", "p", "--model", "m", "--input", "1")
	for _, key := range []string{"a", "c"} {
		r := mustRun(t, 3, "check", "--db", db, "--key", key, "--json")
		b := decode(t, r.stdout)["breach"].(map[string]any)
		if b["id"] != "acme-req" || b["level"] != "org" || b["owner"] != "acme" || b["key"] != nil || b["used"] != 3.0 {
			t.Errorf("check %s: breach %v; want the org limit acme-req, used 3", key, b)
		}
	}
	// A key in no team is not bound.
	mustRun(t, 0, "check", "--db", db, "--key", "loner")
	ins := mustRun(t, 0, "inspect", "--db", db, "--org", "acme", "--json").stdout
	if ls := decode(t, ins)["limits"].([]any); len(ls) != 1 {
		t.Errorf("inspect --org acme: got %d limits; want only the org's own:\n%s", len(ls), ins)
	}
	if s := status(t, ins, "acme-req"); s["used"] != 3.0 || s["owner"] != "acme" {
		t.Errorf("inspect --org acme: got %v; want used 3", s)
	}
	if s := status(t, mustRun(t, 0, "inspect", "--db", db, "--team", "eng", "--json").stdout, "eng-req"); s["used"] != 2.0 {
		t.Errorf("inspect --team eng: got %v; want used 2 (a and b)", s)
	}
	out := mustRun(t, 0, "inspect", "--db", db, "--org", "acme").stdout
	if !strings.Contains(out, "org:acme") {
		t.Errorf("inspect --org acme: got\n%s\nwant owner org:acme", out)
	}

	// Listing order: level (default, key, team, org), then owner.
	mustRun(t, 0, "limit", "set", "--db", db, "--default", "--limit", "5", "--window", "1h", "--id", "zz-default")
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "a", "--limit", "5", "--window", "1h", "--id", "zz-key")
	mustRun(t, 0, "limit", "set", "--db", db, "--team", "ops", "--limit", "5", "--window", "1h", "--id", "aa-ops")
	var ids, levels []string
	for _, l := range decode(t, mustRun(t, 0, "limit", "ls", "--db", db, "--json").stdout)["limits"].([]any) {
		l := l.(map[string]any)
		ids, levels = append(ids, l["id"].(string)), append(levels, l["level"].(string))
		if l["level"] == "default" && (l["owner"] != nil || l["key"] != nil) {
			t.Errorf("a default limit: got %v; want owner and key null", l)
		}
	}
	if got, want := strings.Join(ids, " "), "zz-default zz-key eng-req aa-ops acme-req"; got != want {
		t.Errorf("limit ls order: got %s; want %s (levels %v)", got, want, levels)
	}
}

// TestImportTeamOrgUser: import keeps an event's team, org and user as
// given, whatever the key's placement.
func TestImportTeamOrgUser(t *testing.T) {
	t.Parallel()
	db := teamsDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--team", "ops", "--limit", "1000", "--window", "daily", "--id", "ops-day")
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "z", "--scope", "user", "--value", "*", "--limit", "1000", "--window", "daily", "--id", "z-users")
	f := writeLines(t,
		`{"key":"z","team":"ops","org":"acme","user":"alice","provider":"p","model":"m","input":40,"at":"2026-03-02T11:00:00Z"}`,
		`{"key":"c","provider":"p","model":"m","input":2,"at":"2026-03-02T11:00:00Z"}`,
		`{"key":"z","user":"bob","provider":"p","model":"m","input":5,"at":"2026-03-02T11:00:00Z"}`,
	)
	mustRun(t, 0, "import", "--db", db, f)
	if u := usedAt(t, db, "ops-day", "2026-03-02T12:00:00Z"); u != 42 {
		t.Errorf("team ops after import: used %v; want 42 (z's event charged to ops as given, c's by placement)", u)
	}
	users := map[string]float64{}
	for _, l := range decode(t, mustRun(t, 0, "inspect", "--db", db, "--key", "z", "--json").stdout)["limits"].([]any) {
		if l := l.(map[string]any); l["id"] == "z-users" {
			users[l["user"].(string)] = l["used"].(float64)
		}
	}
	if users["alice"] != 40 || users["bob"] != 5 || len(users) != 2 {
		t.Errorf("per-user counters after import: got %v; want alice 40, bob 5", users)
	}
	bad := writeLines(t, `{"key":"z","provider":"p","model":"m","user":"a\u0007b"}`)
	if r := mustRun(t, 2, "import", "--db", db, bad); !strings.Contains(r.stderr, "user") {
		t.Errorf("import of a bad user: stderr %q; want it to name user", r.stderr)
	}
	mustRun(t, 0, "verify", "--db", db)
}
