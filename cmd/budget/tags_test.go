package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTagsFromTheCommandLine: --tag on record, check and reserve feeds
// tag limits set with --scope tag; inspect shows a per-value limit once
// per value, with its tag.
func TestTagsFromTheCommandLine(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--scope", "tag", "--value", "Project=atlas", "--window", "1h", "--limit", "100")
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "k", "--scope", "tag", "--value", "project=*", "--window", "1h", "--limit", "1000")
	mustRun(t, 0, "record", "--db", db, "--key", "k", "--provider", "p", "--model", "m", "--tag", "project=atlas", "--tag", "feature=x", "--input", "60")
	mustRun(t, 0, "record", "--db", db, "--key", "k", "--provider", "p", "--model", "m", "--input", "500") // untagged
	r := mustRun(t, 3, "check", "--db", db, "--key", "k", "--tag", "project=atlas", "--tokens", "50", "--json")
	var d struct {
		Allowed bool
		Breach  struct {
			ScopeValue string `json:"scope_value"`
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil || d.Allowed || d.Breach.ScopeValue != "project=atlas" {
		t.Fatalf("check atlas 50 (60 of 100) = %s, %v; want refused by project=atlas", r.stdout, err)
	}
	mustRun(t, 0, "check", "--db", db, "--key", "k", "--tag", "project=zeus", "--tokens", "50")
	mustRun(t, 0, "check", "--db", db, "--key", "k", "--tokens", "50") // no tag: no tag limit applies
	mustRun(t, 0, "reserve", "--db", db, "--key", "k", "--tag", "project=zeus", "--tokens", "30")

	var rep struct {
		Limits []struct {
			ScopeValue string  `json:"scope_value"`
			Tag        *string `json:"tag"`
			Used       int64   `json:"used"`
			Reserved   int64   `json:"reserved"`
		}
	}
	out := mustRun(t, 0, "inspect", "--db", db, "--key", "k", "--json").stdout
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	got := map[string][2]int64{}
	for _, l := range rep.Limits {
		k := l.ScopeValue
		if l.Tag != nil {
			k += " " + *l.Tag
		}
		got[k] = [2]int64{l.Used, l.Reserved}
	}
	want := map[string][2]int64{"project=atlas": {60, 0}, "project=* project=atlas": {60, 0}, "project=* project=zeus": {0, 30}}
	if len(got) != len(want) || got["project=atlas"] != want["project=atlas"] || got["project=* project=atlas"] != want["project=* project=atlas"] ||
		got["project=* project=zeus"] != want["project=* project=zeus"] {
		t.Errorf("inspect --json limits = %v; want %v", got, want)
	}
	table := mustRun(t, 0, "inspect", "--db", db, "--key", "k").stdout
	if !strings.Contains(table, "tag=project=zeus (*)") || !strings.Contains(table, "tag=project=atlas") {
		t.Errorf("inspect table lacks the per-value rows:\n%s", table)
	}
}

// TestTagFlagRefusesBadTags: a bad --tag or tag --value exits 2 naming
// the field and the value, writing nothing.
func TestTagFlagRefusesBadTags(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"record", "--key", "k", "--provider", "p", "--model", "m", "--tag", "project"}, []string{`tag "project"`, "name=value"}},
		{[]string{"record", "--key", "k", "--provider", "p", "--model", "m", "--tag", "a=1,b=2"}, []string{`tag "a=1,b=2"`, "one NAME=VALUE per --tag"}},
		{[]string{"check", "--key", "k", "--tag", "a=1", "--tag", "A=2"}, []string{`tag "a"`, "given twice"}},
		{[]string{"reserve", "--key", "k", "--tokens", "5", "--tag", "a=*"}, []string{`tag a "*"`, "* is not a value"}},
		{[]string{"limit", "set", "--key", "k", "--scope", "tag", "--value", "project", "--window", "1h", "--limit", "5"}, []string{`value "project"`, "name=value"}},
		{[]string{"report", "--by", "tag:"}, []string{`by ""`, "needs a name"}},
	} {
		r := run(t, append(c.args, "--db", db)...)
		if r.code != 2 || r.stdout != "" {
			t.Errorf("%v: got %v; want exit 2 and nothing on stdout", c.args, r)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%v: stderr %q lacks %q", c.args, r.stderr, w)
			}
		}
	}
	if exists(db) {
		if out := mustRun(t, 0, "export", "--db", db).stdout; out != "" {
			t.Errorf("refused commands wrote events:\n%s", out)
		}
	}
}

// TestReportByTag: report --by tag:NAME groups by the tag's value, empty
// for events without it.
func TestReportByTag(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustImport(t, db, `{"key":"k","provider":"p","model":"m","input":10,"at":"2026-03-02T09:00:00Z","tags":{"project":"atlas","feature":"search"}}
{"key":"k","provider":"p","model":"m","input":20,"at":"2026-03-02T09:00:00Z","tags":{"project":"atlas"}}
{"key":"k","provider":"p","model":"m","input":40,"at":"2026-03-02T09:00:00Z","tags":{"project":"zeus"}}
{"key":"k","provider":"p","model":"m","input":80,"at":"2026-03-02T09:00:00Z"}
`)
	got := mustRun(t, 0, "report", "--db", db, "--since", "2026-03-01", "--until", "2026-03-03", "--by", "tag:project", "--format", "csv").stdout
	want := `tag:project,requests,input,output,reasoning,cache_read,cache_write,tokens,usd
,1,80,0,0,0,0,80,
atlas,2,30,0,0,0,0,30,
zeus,1,40,0,0,0,0,40,
`
	if got != want {
		t.Errorf("report --by tag:project:\n%s\nwant\n%s", got, want)
	}
	js := mustRun(t, 0, "report", "--db", db, "--since", "2026-03-02T08:00:00Z", "--until", "2026-03-02T10:00:00Z", "--by", "tag:feature", "--format", "json").stdout
	if !strings.Contains(js, `"tag:feature": "search"`) || !strings.Contains(js, `"tag:feature": null`) {
		t.Errorf("report --by tag:feature --format json:\n%s", js)
	}
}

// TestImportExportTagsRoundTrip: export writes each event's tags as an
// object, import reads them back, and a second export of the imported
// history is the first, byte for byte.
func TestImportExportTagsRoundTrip(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "record", "--db", db, "--key", "k", "--provider", "p", "--model", "m", "--tag", "project=atlas", "--tag", "Feature=Search", "--input", "5",
		"--request-id", "r1", "--at", "2026-03-02T09:00:00Z")
	mustRun(t, 0, "record", "--db", db, "--key", "k", "--provider", "p", "--model", "m", "--input", "7", "--request-id", "r2", "--at", "2026-03-02T09:01:00Z")
	first := mustRun(t, 0, "export", "--db", db).stdout
	if !strings.Contains(first, `"tags":{"feature":"Search","project":"atlas"}`) || strings.Count(first, `"tags"`) != 1 {
		t.Fatalf("export:\n%s\nwant r1's tags as an object, r2 without", first)
	}
	f := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(f, []byte(first), 0o600); err != nil {
		t.Fatal(err)
	}
	db2 := tempDB(t)
	mustRun(t, 0, "import", "--db", db2, f)
	if second := mustRun(t, 0, "export", "--db", db2).stdout; second != first {
		t.Errorf("export after import:\n%s\nwant\n%s", second, first)
	}
	csv := mustRun(t, 0, "export", "--db", db, "--format", "csv").stdout
	if !strings.Contains(csv, `,"feature=Search,project=atlas"`) {
		t.Errorf("export --format csv lacks r1's tags:\n%s", csv)
	}
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(bad, []byte(`{"key":"k","provider":"p","model":"m","tags":{"project":"a,b"}}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := run(t, "import", "--db", db2, bad); r.code != 2 || !strings.Contains(r.stderr, `tags project "a,b"`) || !strings.Contains(r.stderr, "line 1") {
		t.Errorf("import of a bad tag: %v; want exit 2 naming line 1, the tag and its value", r)
	}
}
