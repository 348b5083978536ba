package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeLines(t *testing.T, lines ...string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "usage.jsonl")
	if err := os.WriteFile(f, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// usedAt is the used value of limit id at the instant at.
func usedAt(t *testing.T, db, id, at string) float64 {
	t.Helper()
	v := decode(t, mustRun(t, 0, "inspect", "--db", db, "--at", at, "--json").stdout)
	for _, l := range v["limits"].([]any) {
		if l := l.(map[string]any); l["id"] == id {
			return l["used"].(float64)
		}
	}
	t.Fatalf("inspect: no limit %s", id)
	return 0
}

func TestImport(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "demo", "--limit", "100000", "--window", "daily", "--id", "day")
	f := writeLines(t,
		`{"request_id":"i1","key":"demo","provider":"anthropic","model":"claude","input":10,"output":5,"at":"2026-03-02T11:00:00Z"}`,
		``,
		`{"request_id":"i2","key":"demo","provider":"anthropic","model":"claude","input":20,"output":5,"reasoning":1,"cache_read":4,"cache_write":6,"at":"2026-03-02T11:00:01Z"}`,
		`  {"key":"demo","provider":"openai","model":"gpt","input":100}  `, // no id, no at: now
		`{"key":"demo","provider":"openai","model":"gpt","input":100,"at":null}`,
	)
	v := decode(t, mustRun(t, 0, "import", "--db", db, "--json", f).stdout)
	wantKeys(t, "import --json", v, "imported", "duplicates")
	if v["imported"] != 4.0 || v["duplicates"] != 0.0 {
		t.Errorf("import: got %v; want 4 imported", v)
	}
	if u := usedAt(t, db, "day", "2026-03-02T12:00:00Z"); u != 241 {
		t.Errorf("used after import: got %v; want 241", u)
	}
	// Running it again changes nothing: every line is a duplicate, those
	// without request_id too.
	r := mustRun(t, 0, "import", "--db", db, f)
	if r.stdout != "imported 0 events, 4 duplicates\n" {
		t.Errorf("second import: got %q", r.stdout)
	}
	if u := usedAt(t, db, "day", "2026-03-02T12:00:00Z"); u != 241 {
		t.Errorf("used after a second import: got %v; want 241", u)
	}
	mustRun(t, 0, "verify", "--db", db)
}

// TestImportBatches imports more than one batch, from stdin, and resumes a
// partial import.
func TestImportBatches(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--limit", "100000000", "--window", "1h", "--id", "h")
	var lines []string
	want := 0
	for i := range 2500 {
		lines = append(lines, fmt.Sprintf(`{"key":"k","provider":"p","model":"m","input":%d,"at":"2026-03-02T11:%02d:00Z"}`, i, i%60))
		want += i
	}
	// A killed import left the first 1000 lines: running the whole input
	// again completes it.
	if r := runStdin(t, strings.Join(lines[:1000], "\n")+"\n", "import", "--db", db, "-"); r.code != 0 {
		t.Fatalf("import - (prefix): %v", r)
	}
	r := runStdin(t, strings.Join(lines, "\n")+"\n", "import", "--db", db, "--json", "-")
	if r.code != 0 {
		t.Fatalf("import -: %v", r)
	}
	var got struct{ Imported, Duplicates int }
	json.Unmarshal([]byte(r.stdout), &got)
	if got.Imported != 1500 || got.Duplicates != 1000 {
		t.Errorf("resumed import: got %+v; want 1500 imported, 1000 duplicates", got)
	}
	if u := usedAt(t, db, "h", "2026-03-02T11:59:59Z"); u != float64(want) {
		t.Errorf("used: got %v; want %d", u, want)
	}
	mustRun(t, 0, "verify", "--db", db)
}

// TestImportAcrossBatches: an import longer than one transaction, whose
// next batch is parsed while the one before is written, stores every event
// once and counts the repeated ids as duplicates, within a batch and across
// its edges.
func TestImportAcrossBatches(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--limit", "100000000000", "--window", "daily", "--id", "d")
	var b strings.Builder
	n, want := 2*importBatch+1, 0
	for i := range n {
		// Every tenth line repeats the request id of the line before it,
		// across the batches' edges too.
		id := i - boolInt(i%10 == 0 && i > 0)
		fmt.Fprintf(&b, `{"request_id":"r%d","key":"k","provider":"p","model":"m","input":%d,"at":"2026-03-02T11:00:00Z"}`+"\n", id, id)
		if i%10 != 0 || i == 0 {
			want += id
		}
	}
	r := runStdin(t, b.String(), "import", "--db", db, "--json", "-")
	if r.code != 0 {
		t.Fatalf("import: %v", r)
	}
	var got struct{ Imported, Duplicates int }
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatal(err)
	}
	if dups := (n - 1) / 10; got.Imported != n-dups || got.Duplicates != dups {
		t.Errorf("import of %d lines: got %+v; want %d imported, %d duplicates", n, got, n-dups, dups)
	}
	if u := usedAt(t, db, "d", "2026-03-02T11:59:59Z"); u != float64(want) {
		t.Errorf("used: got %v; want %d", u, want)
	}
	mustRun(t, 0, "verify", "--db", db)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestImportBadLine: a bad line 3 exits 2 naming line 3, and nothing is
// imported, not even lines 1 and 2.
func TestImportBadLine(t *testing.T) {
	t.Parallel()
	good := `{"request_id":"g%d","key":"demo","provider":"p","model":"m","input":10,"at":"2026-03-02T11:00:00Z"}`
	for _, tc := range []struct {
		line  string
		field string // named on stderr
	}{
		{`{"key":"demo","provider":"p","model":"m","input":-1}`, `input "-1"`},
		{`{"key":"demo","provider":"p","model":"m","input":9007199254740992}`, `input "9007199254740992"`},
		{`{"key":"demo","provider":"p","model":"m","output":1.5}`, `output "1.5"`},
		{`{"key":"demo","provider":"p","model":"m","input":1,"cache_read":2}`, `cache_read+cache_write "2"`},
		{`{"key":"demo","provider":"p","input":1}`, `model ""`},
		{`{"key":"demo","model":"m","input":1}`, `provider ""`},
		{`{"key":"","provider":"p","model":"m"}`, `key ""`},
		{`{"key":"demo","provider":"p","model":"m","tokens":5}`, `field "tokens"`},
		{`{"key":"demo","provider":"p","model":"m","at":"2026-03-02 11:00"}`, `at "2026-03-02 11:00"`},
		{`{"key":"demo","provider":"p","model":"m","input":"ten"}`, "input"},
		{`{"key":7,"provider":"p","model":"m"}`, "key"},
		{`{"key":"demo","provider":"p","model":"m"`, "json"},
		{`{"key":"demo","provider":"p","model":"m"} {"key":"demo"}`, "json"},
		{`not json`, "json"},
		{`{"key":"demo","provider":"p","model":"m","input":"1"}`, `input "\"1\"": want an integer between 0 and 2^53-1, not a string`},
		{`{"key":"demo","provider":"p","model":"m","cache_write":"0"}`, `cache_write`},
		{`{"key":"de\nmo","provider":"p","model":"m"}`, `key "de\nmo": must not contain control characters`},
		{`{"key":"demo","provider":"p\tq","model":"m"}`, `provider`},
		{`{"key":"demo","provider":"p","model":"m","request_id":"a\u0000b"}`, `request_id`},
		{`{"key":"demo","provider":"p","model":"` + strings.Repeat("m", 300) + `"}`, `model "mmm`},
	} {
		db := tempDB(t)
		f := writeLines(t, fmt.Sprintf(good, 1), fmt.Sprintf(good, 2), tc.line, fmt.Sprintf(good, 4))
		r := run(t, "import", "--db", db, f)
		if r.code != 2 || !strings.HasPrefix(r.stderr, "budget: line 3: ") || !strings.Contains(r.stderr, tc.field) {
			t.Errorf("import with line 3 %s: got %v; want exit 2 naming line 3 and %s", tc.line, r, tc.field)
		}
		if exists(db) {
			t.Errorf("import with a bad line 3 created the database")
		}
	}

	// On an existing database: nothing imported.
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "demo", "--limit", "1000", "--window", "daily", "--id", "day")
	f := writeLines(t, fmt.Sprintf(good, 1), fmt.Sprintf(good, 2), `{"key":"demo","provider":"p","model":"m","input":-1}`)
	mustRun(t, 2, "import", "--db", db, f)
	if u := usedAt(t, db, "day", "2026-03-02T12:00:00Z"); u != 0 {
		t.Errorf("used after a failed import: got %v; want 0", u)
	}
	// The good lines are still importable: nothing half-written blocks them.
	v := decode(t, mustRun(t, 0, "import", "--db", db, "--json", writeLines(t, fmt.Sprintf(good, 1), fmt.Sprintf(good, 2))).stdout)
	if v["imported"] != 2.0 {
		t.Errorf("import after a failed one: got %v; want 2 imported", v)
	}
}

func TestImportMissingFile(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	r := run(t, "import", "--db", db, filepath.Join(t.TempDir(), "nope.jsonl"))
	if r.code != 1 || !strings.Contains(r.stderr, "nope.jsonl") || exists(db) {
		t.Errorf("import of a missing file: got %v; want exit 1 naming it, no database", r)
	}
}

// TestImportSameLinesTwoFiles: lines without request_id in two files are
// distinct events even when their text is identical.
func TestImportSameLinesTwoFiles(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--limit", "1000", "--window", "daily", "--id", "d")
	line := `{"key":"k","provider":"p","model":"m","input":7,"at":"2026-03-02T11:00:00Z"}`
	mon, tue := writeLines(t, line), writeLines(t, line)
	mustRun(t, 0, "import", "--db", db, mon)
	mustRun(t, 0, "import", "--db", db, tue)
	mustRun(t, 0, "import", "--db", db, tue) // the same file again: a duplicate
	if u := usedAt(t, db, "d", "2026-03-02T12:00:00Z"); u != 14 {
		t.Errorf("used: got %v; want 14 (one event per file)", u)
	}
}
