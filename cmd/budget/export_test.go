package main

import (
	"strings"
	"testing"
)

func TestExport(t *testing.T) {
	t.Parallel()
	db := newReportDB(t)
	r := mustRun(t, 0, "export", "--db", db, "--since", "2026-02-01T12:00:00Z", "--until", "2026-02-03T12:00:00Z")
	want := `{"request_id":"r2","key":"k1","provider":"openai","model":"gpt-4o","team":"","org":"","input":200,"output":20,"reasoning":5,"cache_read":0,"cache_write":0,"at":"2026-02-01T23:00:00Z","cost":750}
{"request_id":"r3","key":"k2","provider":"anthropic","model":"claude","team":"","org":"","input":50,"output":5,"reasoning":0,"cache_read":0,"cache_write":0,"at":"2026-02-02T00:00:00Z","cost":null}
{"request_id":"r4","key":"k1","provider":"openai","model":"gpt-4o","team":"","org":"","input":1000,"output":100,"reasoning":0,"cache_read":400,"cache_write":0,"at":"2026-02-02T12:00:00Z","cost":3500}
{"request_id":"r5","key":"k2","provider":"anthropic","model":"claude","team":"","org":"","input":70,"output":0,"reasoning":0,"cache_read":0,"cache_write":0,"at":"2026-02-03T06:00:00Z","cost":null}
`
	if r.stdout != want || r.stderr != "" {
		t.Errorf("export: got %v; want stdout\n%s", r, want)
	}
	r = mustRun(t, 0, "export", "--db", db, "--key", "k2", "--format", "csv")
	want = `request_id,key,provider,model,user,team,org,input,output,reasoning,cache_read,cache_write,at,cost,tags
r3,k2,anthropic,claude,,,,50,5,0,0,0,2026-02-02T00:00:00Z,,
r5,k2,anthropic,claude,,,,70,0,0,0,0,2026-02-03T06:00:00Z,,
`
	if r.stdout != want {
		t.Errorf("export --key k2 --format csv: got\n%s\nwant\n%s", r.stdout, want)
	}

	missing := tempDB(t)
	for _, tc := range []struct {
		args         []string
		field, value string
	}{
		{[]string{"--format", "json"}, "format", "json"},
		{[]string{"--since", "then"}, "since", "then"},
		{[]string{"--since", "2026-02-02", "--until", "2026-02-02"}, "until", "2026-02-02"},
		{[]string{"--key", "a\nb"}, "key", "a"},
	} {
		r := run(t, append([]string{"export", "--db", missing}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.field) || !strings.Contains(r.stderr, tc.value) || r.stdout != "" {
			t.Errorf("export %q: got %v; want exit 2 naming %s and %s", tc.args, r, tc.field, tc.value)
		}
	}
	if r := run(t, "export", "--db", missing); r.code != 1 || exists(missing) {
		t.Errorf("export of a missing database: got %v; want exit 1, no file", r)
	}
}

// TestImportCost: an imported cost (micro-dollars) is kept instead of the
// price table's, and counts against usd limits and in reports.
func TestImportCost(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "price", "set", "--db", db, "--provider", "openai", "--model", "gpt-4o", "--input", "2.5", "--output", "10",
		"--from", "2026-01-01T00:00:00Z")
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--metric", "usd", "--limit", "1", "--window", "daily", "--id", "usd")
	f := writeLines(t,
		`{"request_id":"a","key":"k","provider":"openai","model":"gpt-4o","input":1000,"at":"2026-03-02T10:00:00Z","cost":123456}`,
		`{"request_id":"b","key":"k","provider":"openai","model":"gpt-4o","input":1000,"at":"2026-03-02T10:00:01Z"}`,
		`{"request_id":"c","key":"k","provider":"anthropic","model":"claude","input":1000,"at":"2026-03-02T10:00:02Z","cost":0}`,
		`{"request_id":"d","key":"k","provider":"anthropic","model":"claude","input":1,"at":"2026-03-02T10:00:03Z","cost":null}`)
	mustRun(t, 0, "import", "--db", db, f)
	// a as given, b priced (1000 x $2.50/M), c as given ($0, known), d unpriced.
	if u := usedAt(t, db, "usd", "2026-03-02T11:00:00Z"); u != 123456+2500 {
		t.Errorf("usd used: got %v; want %d", u, 123456+2500)
	}
	got := mustRun(t, 0, "report", "--db", db, "--since", "2026-03-02", "--until", "2026-03-03", "--by", "model", "--format", "csv").stdout
	if want := "model,requests,input,output,reasoning,cache_read,cache_write,tokens,usd\nclaude,2,1001,0,0,0,0,1001,\ngpt-4o,2,2000,0,0,0,0,2000,0.125956\n"; got != want {
		t.Errorf("report: got\n%s\nwant\n%s", got, want)
	}
	for _, e := range exportedEvents(t, db) {
		if want := map[string]int64{"a": 123456, "b": 2500, "c": 0}[e.RequestID]; (e.Cost == nil) != (e.RequestID == "d") || e.Cost != nil && *e.Cost != want {
			t.Errorf("export of %s: cost %v; want %d (none for d)", e.RequestID, e.Cost, want)
		}
	}
	mustRun(t, 0, "verify", "--db", db)

	for _, line := range []string{
		`{"key":"k","provider":"p","model":"m","cost":-1}`,
		`{"key":"k","provider":"p","model":"m","cost":1.5}`,
		`{"key":"k","provider":"p","model":"m","cost":"12"}`,
		`{"key":"k","provider":"p","model":"m","cost":9007199254740992}`,
	} {
		r := run(t, "import", "--db", db, writeLines(t, line))
		if r.code != 2 || !strings.Contains(r.stderr, "cost") || !strings.Contains(r.stderr, "line 1") {
			t.Errorf("import %s: got %v; want exit 2 naming cost on line 1", line, r)
		}
	}
}
