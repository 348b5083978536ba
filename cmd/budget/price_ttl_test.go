package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A 1-hour cache-write price from the CLI: price set --cache-write-1h, a
// row without one at its cache-write price, both in price ls --json, kept
// by a price file made from that output (JSON) and by a CSV column, and by
// config export and apply; a bad one exits 2 naming the field, writing
// nothing.
func TestPriceCacheWrite1h(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	from := "2026-01-01T00:00:00Z"
	mustRun(t, 0, "price", "set", "--db", db, "--provider", "anthropic", "--model", "claude-sonnet-4-5", "--input", "3", "--output", "15",
		"--cache-write", "3.75", "--cache-write-1h", "6", "--from", from)
	mustRun(t, 0, "price", "set", "--db", db, "--provider", "anthropic", "--model", "claude-haiku", "--input", "1", "--output", "5",
		"--cache-write", "1.25", "--from", from)
	if r := mustRun(t, 2, "price", "set", "--db", db, "--provider", "anthropic", "--model", "claude-x", "--input", "1", "--output", "5",
		"--cache-write-1h", "-2"); !strings.Contains(r.stderr, "cache_write_1h") {
		t.Errorf("bad --cache-write-1h: stderr %q; want the field named", r.stderr)
	}
	ls := mustRun(t, 0, "price", "ls", "--db", db, "--json").stdout
	oneHour := func(db string) map[string]any {
		t.Helper()
		out := map[string]any{}
		for _, r := range decode(t, mustRun(t, 0, "price", "ls", "--db", db, "--json").stdout)["prices"].([]any) {
			p := r.(map[string]any)
			out[p["model"].(string)] = p["cache_write_1h"]
		}
		return out
	}
	want := map[string]any{"claude-haiku": "1.25", "claude-sonnet-4-5": "6.00"}
	if got := oneHour(db); len(got) != 2 || got["claude-haiku"] != want["claude-haiku"] || got["claude-sonnet-4-5"] != want["claude-sonnet-4-5"] {
		t.Fatalf("price ls --json cache_write_1h = %v; want %v", got, want)
	}
	// price ls --json is a price file.
	file := filepath.Join(t.TempDir(), "prices.json")
	if err := os.WriteFile(file, []byte(ls), 0o644); err != nil {
		t.Fatal(err)
	}
	db2 := tempDB(t)
	mustRun(t, 0, "price", "import", "--db", db2, file)
	if got := mustRun(t, 0, "price", "ls", "--db", db2, "--json").stdout; got != ls {
		t.Errorf("price ls after importing it:\n%s\nwant\n%s", got, ls)
	}
	csvFile := filepath.Join(t.TempDir(), "p.csv")
	os.WriteFile(csvFile, []byte("provider,model,input,output,cache_write,cache_write_1h\nanthropic,claude-opus,5,25,6.25,10\n"), 0o644)
	mustRun(t, 0, "price", "import", "--db", db2, csvFile)
	if got := oneHour(db2)["claude-opus"]; got != "10.00" {
		t.Errorf("CSV cache_write_1h: %v; want 10.00", got)
	}
	// config export and apply keep it.
	doc := mustRun(t, 0, "config", "export", "--db", db).stdout
	if !strings.Contains(doc, `"cache_write_1h"`) {
		t.Fatalf("config export has no cache_write_1h:\n%s", doc)
	}
	db3 := tempDB(t)
	mustRun(t, 0, "config", "apply", "--db", db3, writeFile(t, "budget.json", doc))
	if got := mustRun(t, 0, "price", "ls", "--db", db3, "--json").stdout; got != ls {
		t.Errorf("price ls after config apply:\n%s\nwant\n%s", got, ls)
	}
}
