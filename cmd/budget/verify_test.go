package main

import (
	"database/sql"
	"strings"
	"testing"

	_ "modernc.org/sqlite"
)

func TestVerify(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "demo", "--limit", "1000", "--window", "1h", "--id", "h")
	for _, at := range []string{"2026-03-02T09:10:00Z", "2026-03-02T09:20:00Z", "2026-03-02T10:10:00Z"} {
		mustRun(t, 0, "record", "--db", db, "--key", "demo", "--provider", "p", "--model", "m", "--input", "10", "--at", at)
	}
	r := mustRun(t, 0, "verify", "--db", db)
	if !strings.HasPrefix(r.stdout, "ok") {
		t.Errorf("verify text: got %q", r.stdout)
	}
	if got := strings.Join(strings.Fields(mustRun(t, 0, "verify", "--db", db, "--json").stdout), ""); got != `{"drifted":[]}` {
		t.Errorf("verify --json without drift: got %s", got)
	}

	// Break a counter behind the tracker's back.
	sdb, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sdb.Exec(`UPDATE counters SET used = used + 7 WHERE limit_id = 'h' AND window_start = ?`,
		testNow.Add(-3*3600e9).UnixNano()); err != nil { // 09:00
		t.Fatal(err)
	}
	sdb.Close()

	r = mustRun(t, 5, "verify", "--db", db, "--json")
	v := decode(t, r.stdout)
	wantKeys(t, "verify --json", v, "drifted")
	d := v["drifted"].([]any)
	if len(d) != 1 {
		t.Fatalf("verify: got %s; want one drifted row", r.stdout)
	}
	wantKeys(t, "drift", d[0], "limit_id", "window_start", "counter", "history")
	row := d[0].(map[string]any)
	if row["limit_id"] != "h" || row["window_start"] != "2026-03-02T09:00:00Z" || row["counter"] != 27.0 || row["history"] != 20.0 {
		t.Errorf("drifted row: got %v", row)
	}
	r = mustRun(t, 5, "verify", "--db", db)
	if !strings.Contains(r.stdout, "1 counters drifted") || !strings.Contains(r.stdout, "2026-03-02T09:00:00Z") || r.stderr != "" {
		t.Errorf("verify text with drift: got %v", r)
	}
}
