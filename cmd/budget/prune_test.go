package main

import (
	"database/sql"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// pruneDB is a database with a daily limit on k1 and a random history over
// 2026-02-15 to 2026-03-01 (testNow is 2026-03-02T12:00:00Z).
func pruneDB(t *testing.T) string {
	t.Helper()
	db := tempDB(t)
	mustRun(t, 0, "price", "set", "--db", db, "--provider", "openai", "--model", "gpt-4o", "--input", "2.5", "--output", "10",
		"--from", "2026-01-01T00:00:00Z")
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "k1", "--limit", "1000000", "--window", "daily", "--id", "k1day")
	mustImport(t, db, randomHistory(rand.New(rand.NewPCG(5, 6)), 300, time.Date(2026, 2, 15, 0, 0, 0, 0, time.UTC), 14))
	return db
}

// pruneReports are reports over pruned and unpruned days that a prune must
// leave byte for byte as they were.
var pruneReports = [][]string{
	{"report", "--since", "2026-02-01", "--until", "2026-03-02", "--by", "key,team,org,user,provider,model,day", "--format", "csv"},
	{"report", "--since", "2026-02-15", "--until", "2026-02-25", "--by", "week,key", "--format", "json"},
	{"report", "--since", "2026-02-20", "--until", "2026-02-27T15:04:05Z", "--by", "model"},
	{"report", "--format", "csv"},
}

func TestPrune(t *testing.T) {
	t.Parallel()
	db := pruneDB(t)
	before := make([]string, len(pruneReports))
	for i, args := range pruneReports {
		before[i] = mustRun(t, 0, append(args, "--db", db)...).stdout
	}
	kept := exportedEvents(t, db, "--since", "2026-02-25")
	all := exportedEvents(t, db)

	r := mustRun(t, 0, "prune", "--db", db, "--before", "2026-02-25T13:00:00Z", "--json")
	v := decode(t, r.stdout)
	wantKeys(t, "prune --json", v, "before", "deleted")
	if v["before"] != "2026-02-25T00:00:00Z" || v["deleted"] != float64(len(all)-len(kept)) {
		t.Errorf("prune --json: got %v; want before 2026-02-25T00:00:00Z (rounded down), deleted %d", v, len(all)-len(kept))
	}
	if r := mustRun(t, 0, "verify", "--db", db); !strings.HasPrefix(r.stdout, "ok") {
		t.Errorf("verify after prune: %v", r)
	}
	if r := mustRun(t, 0, "verify", "--db", db, "--json"); !strings.Contains(r.stdout, `"rollups_drifted": []`) {
		t.Errorf("verify --json after prune: %v", r)
	}
	for i, args := range pruneReports {
		if after := mustRun(t, 0, append(args, "--db", db)...).stdout; after != before[i] {
			t.Errorf("budget %s after prune:\n%s\nbefore:\n%s", strings.Join(args, " "), after, before[i])
		}
	}
	// A report that splits a pruned day cannot be answered.
	if r := run(t, "report", "--db", db, "--since", "2026-02-20T06:00:00Z", "--until", "2026-02-26"); r.code != 2 || !strings.Contains(r.stderr, "since") {
		t.Errorf("report splitting a pruned day: got %v; want exit 2 naming since", r)
	}

	// Export gives what is left, and says on stderr what is only rolled up.
	r = mustRun(t, 0, "export", "--db", db)
	if got := exportedEvents(t, db); len(got) != len(kept) {
		t.Errorf("export after prune: got %d events; want the %d from the horizon on", len(got), len(kept))
	}
	if !strings.Contains(r.stderr, "2026-02-25T00:00:00Z") || !strings.Contains(r.stderr, "rollups") {
		t.Errorf("export after prune: stderr %q; want a note on the rolled-up range", r.stderr)
	}
	if r := mustRun(t, 0, "export", "--db", db, "--since", "2026-02-26"); r.stderr != "" {
		t.Errorf("export after the horizon: stderr %q; want none", r.stderr)
	}

	// Events before the horizon are refused, nothing written.
	exported := mustRun(t, 0, "export", "--db", db).stdout
	if r := run(t, "record", "--db", db, "--key", "k1", "--provider", "openai", "--model", "gpt-4o", "--input", "5",
		"--at", "2026-02-24T23:59:59Z"); r.code != 2 || !strings.Contains(r.stderr, "at") || !strings.Contains(r.stderr, "horizon") {
		t.Errorf("record before the horizon: got %v; want exit 2 naming at", r)
	}
	f := writeLines(t,
		`{"key":"k1","provider":"openai","model":"gpt-4o","input":1,"at":"2026-02-26T00:00:00Z"}`,
		`{"key":"k1","provider":"openai","model":"gpt-4o","input":1,"at":"2026-02-24T00:00:00Z"}`)
	if r := run(t, "import", "--db", db, f); r.code != 2 || !strings.Contains(r.stderr, "line 2") || !strings.Contains(r.stderr, "horizon") {
		t.Errorf("import of an event before the horizon: got %v; want exit 2 naming line 2", r)
	}
	if got := mustRun(t, 0, "export", "--db", db).stdout; got != exported {
		t.Errorf("a refused record or import wrote events")
	}

	// Pruning to the same horizon again deletes nothing.
	if r := mustRun(t, 0, "prune", "--db", db, "--before", "2026-02-25"); r.stdout != "deleted 0 events before 2026-02-25T00:00:00Z; their daily rollups remain\n" {
		t.Errorf("prune again: got %q", r.stdout)
	}
	if r := mustRun(t, 0, "prune", "--db", db, "--before", "2026-02-20"); !strings.Contains(r.stdout, "pruned already") {
		t.Errorf("prune to an earlier horizon: got %q", r.stdout)
	}

	// A limit created afterwards, whose window (the week of 2026-02-23)
	// starts before the horizon on a UTC midnight, is seeded from the
	// rollups of the pruned days and the events after them.
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "k2", "--limit", "100000000", "--window", "weekly", "--id", "k2week")
	want := mustRun(t, 0, "report", "--db", db, "--since", "2026-02-23", "--until", "2026-03-02", "--key", "k2", "--format", "csv").stdout
	fields := strings.Split(strings.Split(want, "\n")[1], ",")
	if used := usedAt(t, db, "k2week", "2026-03-01T23:00:00Z"); itoa(int64(used)) != fields[6] {
		t.Errorf("weekly limit created after prune: used %v; want %s (the week's tokens)", used, fields[6])
	}
	mustRun(t, 0, "verify", "--db", db)
}

func TestPruneRefusals(t *testing.T) {
	t.Parallel()
	db := pruneDB(t)
	exported := mustRun(t, 0, "export", "--db", db).stdout
	unchanged := func(what string) {
		t.Helper()
		if got := mustRun(t, 0, "export", "--db", db).stdout; got != exported {
			t.Errorf("%s deleted events", what)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--before", "2026-03-02T05:00:00Z"}, "today"},
		{[]string{"--before", "2026-03-03"}, "today"},
		{[]string{"--before", "soon"}, "soon"},
		{[]string{}, "--before"},
		{[]string{"--before", "2026-02-20", "stray"}, "stray"},
	} {
		r := run(t, append([]string{"prune", "--db", db}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("prune %q: got %v; want exit 2 saying %s", tc.args, r, tc.want)
		}
		unchanged(strings.Join(tc.args, " "))
	}
	if r := run(t, "prune", "--db", tempDB(t), "--before", "2026-02-20"); r.code != 1 {
		t.Errorf("prune on a missing database: got %v; want exit 1", r)
	}

	// A limit whose current window started before the horizon: 240h
	// windows are aligned to the epoch, the current one started on
	// 2026-02-26.
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "k0", "--limit", "5", "--window", "240h", "--id", "tendays")
	r := mustRun(t, 2, "prune", "--db", db, "--before", "2026-02-28")
	if !strings.Contains(r.stderr, "before") || !strings.Contains(r.stderr, "tendays") {
		t.Errorf("prune into a live window: stderr %q; want before and the limit named", r.stderr)
	}
	unchanged("a prune into a live window")
	mustRun(t, 0, "limit", "rm", "--db", db, "tendays")

	// Rollups that disagree with their events: refused, and verify says so.
	sdb, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sdb.Exec(`UPDATE rollups SET input = input + 1 WHERE day = ? AND key = 'k1'`,
		time.Date(2026, 2, 20, 0, 0, 0, 0, time.UTC).UnixNano()); err != nil {
		t.Fatal(err)
	}
	if r := mustRun(t, 2, "prune", "--db", db, "--before", "2026-02-21"); !strings.Contains(r.stderr, "rollups") {
		t.Errorf("prune over drifted rollups: stderr %q; want the rollups named", r.stderr)
	}
	unchanged("a prune over drifted rollups")
	v := decode(t, mustRun(t, 5, "verify", "--db", db, "--json").stdout)
	rd := v["rollups_drifted"].([]any)
	if len(rd) == 0 || len(v["drifted"].([]any)) != 0 {
		t.Fatalf("verify --json over a drifted rollup: got %v; want rollups_drifted, drifted []", v)
	}
	wantKeys(t, "rollup drift", rd[0], "day", "key", "team", "org", "user", "provider", "model", "rollup", "events")
	d := rd[0].(map[string]any)
	rollup, events := d["rollup"].(map[string]any), d["events"].(map[string]any)
	wantKeys(t, "rollup totals", rollup, "requests", "input", "output", "reasoning", "cache_read", "cache_write", "cost", "no_price")
	if d["day"] != "2026-02-20" || d["key"] != "k1" || rollup["input"] != events["input"].(float64)+1 {
		t.Errorf("rollup drift: got %v; want day 2026-02-20, key k1, rollup input one more than the events'", d)
	}
	if r := mustRun(t, 5, "verify", "--db", db); !strings.Contains(r.stdout, "daily rollups drifted") || !strings.Contains(r.stdout, "2026-02-20") {
		t.Errorf("verify text over a drifted rollup: %v", r)
	}
	// Put right, the rollups pass again.
	if _, err := sdb.Exec(`UPDATE rollups SET input = input - 1 WHERE day = ? AND key = 'k1'`,
		time.Date(2026, 2, 20, 0, 0, 0, 0, time.UTC).UnixNano()); err != nil {
		t.Fatal(err)
	}
	sdb.Close()
	mustRun(t, 0, "verify", "--db", db)

	// A reservation made before the horizon that may still settle.
	id := strings.TrimSpace(mustRunAt(t, time.Date(2026, 2, 27, 10, 0, 0, 0, time.UTC), 0, "reserve", "--db", db, "--key", "k1",
		"--provider", "openai", "--model", "gpt-4o", "--tokens", "10", "--ttl", "1h").stdout)
	r = mustRun(t, 2, "prune", "--db", db, "--before", "2026-02-28")
	if !strings.Contains(r.stderr, "before") || !strings.Contains(r.stderr, id) {
		t.Errorf("prune past an open reservation: stderr %q; want before and %s named", r.stderr, id)
	}
	unchanged("a prune past an open reservation")
	mustRun(t, 0, "prune", "--db", db, "--before", "2026-02-27") // the reservation is after this one
}
