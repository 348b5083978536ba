package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
)

const (
	importBenchEvents = 200_000
	importBenchKeys   = 50
)

// importBenchSchema is the sqlite3 shell's side: a table with the history's
// columns, a unique (key, request_id) index and a covering index, in WAL.
const importBenchSchema = `PRAGMA journal_mode=WAL;
CREATE TABLE usage (
	request_id  TEXT    NOT NULL,
	key         TEXT    NOT NULL,
	provider    TEXT    NOT NULL,
	model       TEXT    NOT NULL,
	input       INTEGER NOT NULL,
	output      INTEGER NOT NULL,
	reasoning   INTEGER NOT NULL,
	cache_read  INTEGER NOT NULL,
	cache_write INTEGER NOT NULL,
	at          INTEGER NOT NULL
);
CREATE UNIQUE INDEX usage_id ON usage (key, request_id);
CREATE INDEX usage_window ON usage (key, at, provider, model, input, output, reasoning, cache_read, cache_write);
`

// BenchmarkImport times `budget import` of 200,000 events (50 keys with 3
// limits each: global daily, provider hourly, model per-minute input; the
// events spread over the last 24 hours) against the sqlite3 shell's
// `.import` of the same rows as CSV into importBenchSchema (synchronous=NORMAL
// like the store), both in the same run, each on a fresh database:
//
//	go test -run '^$' -bench Import -benchtime 1x ./cmd/budget/
//
// It reports events/s for both and sqlite3/budget, how many times faster
// the shell is. The import runs in process (Main.Run), the shell as a
// process of its own. Skipped without sqlite3 on PATH.
func BenchmarkImport(b *testing.B) {
	shell, err := exec.LookPath("sqlite3")
	if err != nil {
		b.Skip("BenchmarkImport compares with the sqlite3 shell, which is not on PATH: install sqlite3 to run it")
	}
	ctx := context.Background()
	dir := b.TempDir()
	jsonl, csv := writeImportBenchFiles(b, dir, time.Now())
	var budgetTime, shellTime time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		db := filepath.Join(dir, fmt.Sprintf("budget-%d.db", i))
		setImportBenchLimits(b, db)
		ref := filepath.Join(dir, fmt.Sprintf("sqlite3-%d.db", i))
		if out, err := exec.Command(shell, ref, importBenchSchema).CombinedOutput(); err != nil {
			b.Fatalf("sqlite3 schema: %v\n%s", err, out)
		}
		b.StartTimer()

		start := time.Now()
		cmd := exec.Command(shell, ref)
		cmd.Stdin = strings.NewReader("PRAGMA synchronous=NORMAL;\n.mode csv\n.import " + csv + " usage\n")
		if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
			b.Fatalf("sqlite3 .import: %v\n%s", err, out)
		}
		shellTime += time.Since(start)

		start = time.Now()
		var stdout, stderr bytes.Buffer
		m := &Main{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Now: time.Now, Getenv: func(string) string { return "" }}
		if err := m.Run(ctx, []string{"import", "--db", db, "--json", jsonl}); err != nil {
			b.Fatalf("budget import: %v\n%s", err, stderr.String())
		}
		budgetTime += time.Since(start)

		b.StopTimer()
		var got struct{ Imported int }
		if err := json.Unmarshal(stdout.Bytes(), &got); err != nil || got.Imported != importBenchEvents {
			b.Fatalf("budget import: got %s (%v); want %d imported", stdout.String(), err, importBenchEvents)
		}
		out, err := exec.Command(shell, ref, "SELECT COUNT(*) FROM usage").Output()
		if n, _ := strconv.Atoi(strings.TrimSpace(string(out))); err != nil || n != importBenchEvents {
			b.Fatalf("sqlite3 .import: got %q rows (%v); want %d", out, err, importBenchEvents)
		}
		b.StartTimer()
	}
	b.StopTimer()
	n := float64(importBenchEvents * b.N)
	budgetRate, shellRate := n/budgetTime.Seconds(), n/shellTime.Seconds()
	b.ReportMetric(budgetRate, "budget-events/s")
	b.ReportMetric(shellRate, "sqlite3-events/s")
	b.ReportMetric(shellRate/budgetRate, "sqlite3/budget")
}

// writeImportBenchFiles writes the events as JSON lines for budget import
// and as CSV rows (the history's columns, at in Unix nanoseconds) for the
// sqlite3 shell: importBenchEvents events round the importBenchKeys keys,
// spread over the 24 hours before now.
func writeImportBenchFiles(b *testing.B, dir string, now time.Time) (jsonl, csv string) {
	b.Helper()
	jsonl, csv = filepath.Join(dir, "events.jsonl"), filepath.Join(dir, "events.csv")
	jf, err := os.Create(jsonl)
	if err != nil {
		b.Fatal(err)
	}
	defer jf.Close()
	cf, err := os.Create(csv)
	if err != nil {
		b.Fatal(err)
	}
	defer cf.Close()
	jw, cw := bufio.NewWriter(jf), bufio.NewWriter(cf)
	start := now.Add(-24 * time.Hour).Truncate(time.Second)
	step := 24 * time.Hour / importBenchEvents
	for i := range importBenchEvents {
		id, key := "req-"+strconv.Itoa(i), "key-"+strconv.Itoa(i%importBenchKeys)
		in, out, cacheRead := 100+i%500, 20+i%100, i%7
		at := start.Add(time.Duration(i) * step).UTC()
		fmt.Fprintf(jw, `{"request_id":%q,"key":%q,"provider":"openai","model":"gpt-4o","input":%d,"output":%d,"reasoning":0,"cache_read":%d,"cache_write":0,"at":%q}`+"\n",
			id, key, in, out, cacheRead, at.Format(time.RFC3339Nano))
		fmt.Fprintf(cw, "%s,%s,openai,gpt-4o,%d,%d,0,%d,0,%d\n", id, key, in, out, cacheRead, at.UnixNano())
	}
	if err := jw.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := cw.Flush(); err != nil {
		b.Fatal(err)
	}
	return jsonl, csv
}

// setImportBenchLimits creates the budget database at path with the 3
// limits of each key.
func setImportBenchLimits(b *testing.B, path string) {
	b.Helper()
	ctx := context.Background()
	db, err := tokenbudget.Open(ctx, path, tokenbudget.Options{Create: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close(ctx)
	max := int64(1 << 50)
	for k := range importBenchKeys {
		key := "key-" + strconv.Itoa(k)
		for _, s := range []budget.LimitSpec{
			{Key: key, Window: "daily"},
			{Key: key, Scope: "provider", ScopeValue: "openai", Window: "1h"},
			{Key: key, Scope: "model", ScopeValue: "gpt-4o", Window: "1m", Metric: "input"},
		} {
			s.Max = &max
			if _, _, err := db.SetLimit(ctx, s); err != nil {
				b.Fatal(err)
			}
		}
	}
}
