package main

import (
	"bytes"
	"database/sql"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	if got := strings.Join(strings.Fields(mustRun(t, 0, "verify", "--db", db, "--json").stdout), ""); got != `{"drifted":[],"rollups_drifted":[],"unpriced":0,"not_checkable":0}` {
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
	wantKeys(t, "verify --json", v, "drifted", "rollups_drifted", "unpriced", "not_checkable")
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

// TestVerifyAfterPrune (issue 23.2): the windows of a 1h limit wholly
// before the prune horizon are not checkable (only daily rollups remain),
// never drift; a daily limit's are checked against the rollups.
func TestVerifyAfterPrune(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	now := time.Date(2026, 10, 5, 12, 0, 0, 0, time.UTC)
	mustRunAt(t, now, 0, "limit", "set", "--db", db, "--key", "k", "--limit", "1000", "--window", "1h", "--id", "hourly")
	mustRunAt(t, now, 0, "limit", "set", "--db", db, "--key", "k", "--limit", "1000", "--window", "daily", "--id", "daily")
	for i, at := range []string{"2026-09-01T10:20:00Z", "2026-09-02T14:40:00Z"} {
		mustRunAt(t, now, 0, "record", "--db", db, "--key", "k", "--provider", "p", "--model", "m", "--input", "15",
			"--request-id", "r"+itoa(int64(i)), "--at", at)
	}
	mustRunAt(t, now, 0, "prune", "--db", db, "--before", "2026-10-01")
	r := mustRunAt(t, now, 0, "verify", "--db", db)
	if !strings.HasPrefix(r.stdout, "ok") || !strings.Contains(r.stderr, "2 counters") {
		t.Errorf("verify after the prune: got %v; want ok, and a note of the 2 counters not checkable on stderr", r)
	}
	v := decode(t, mustRunAt(t, now, 0, "verify", "--db", db, "--json").stdout)
	if len(v["drifted"].([]any)) != 0 || v["not_checkable"] != 2.0 {
		t.Errorf("verify --json after the prune: got %v; want no drift, not_checkable 2", v)
	}
	// A daily window before the horizon is still checked, from the rollups.
	sdb, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sdb.Exec(`UPDATE counters SET used = used + 7 WHERE limit_id = 'daily' AND window_start = ?`,
		time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC).UnixNano()); err != nil {
		t.Fatal(err)
	}
	sdb.Close()
	v = decode(t, mustRunAt(t, now, 5, "verify", "--db", db, "--json").stdout)
	if d := v["drifted"].([]any); len(d) != 1 || d[0].(map[string]any)["limit_id"] != "daily" || d[0].(map[string]any)["history"] != 15.0 {
		t.Errorf("verify --json with a broken daily counter before the horizon: got %v; want it drifted from the rollup's 15", v)
	}
}

// One overwritten page of the usage table: the counters and the covering
// index still agree, so only reading the table itself finds it.
func TestVerifyFindsCorruptUsagePage(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "k0", "--limit", "1000000", "--window", "daily")
	var lines strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&lines, `{"request_id":"r%05d","key":"k%d","provider":"openai","model":"gpt-4o","input":%d,"output":7,"at":"2026-03-02T08:%02d:00Z"}`+"\n", i, i%5, i%100, i%60)
	}
	imp := filepath.Join(t.TempDir(), "u.jsonl")
	if err := os.WriteFile(imp, []byte(lines.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	mustRun(t, 0, "import", "--db", db, imp)
	mustRun(t, 0, "verify", "--db", db, "--integrity")

	// Find a leaf page of the table's b-tree (after a checkpoint, so the
	// file holds every page) and overwrite it.
	sdb, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sdb.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	var root, pageSize int64
	if err := sdb.QueryRow(`SELECT rootpage FROM sqlite_master WHERE name = 'usage'`).Scan(&root); err != nil {
		t.Fatal(err)
	}
	if err := sdb.QueryRow(`PRAGMA page_size`).Scan(&pageSize); err != nil {
		t.Fatal(err)
	}
	sdb.Close()
	f, err := os.OpenFile(db, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	page := make([]byte, pageSize)
	if _, err := f.ReadAt(page, (root-1)*pageSize); err != nil {
		t.Fatal(err)
	}
	if page[0] != 0x02 { // an interior index b-tree page: the table spans several pages
		t.Fatalf("usage root page type %#x; want an interior page (0x02): the test needs more rows", page[0])
	}
	// The right-most child pointer sits at offset 8 of an interior page.
	child := int64(binary.BigEndian.Uint32(page[8:12]))
	junk := bytes.Repeat([]byte{0xA5}, int(pageSize))
	if _, err := f.WriteAt(junk, (child-1)*pageSize); err != nil {
		t.Fatal(err)
	}
	f.Close()

	r := mustRun(t, 1, "verify", "--db", db)
	if !strings.Contains(r.stderr, "corrupt") {
		t.Errorf("verify on a corrupt usage page: stderr %q; want it to say corrupt", r.stderr)
	}
	r = mustRun(t, 1, "verify", "--db", db, "--json")
	v := decode(t, r.stdout)
	if c, _ := v["corruption"].([]any); len(c) == 0 {
		t.Errorf("verify --json on a corrupt page: got %s; want a corruption list", r.stdout)
	}
	mustRun(t, 1, "verify", "--db", db, "--integrity")
}
