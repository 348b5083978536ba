package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// applyTargets are the databases a config is applied to: SQLite, and
// PostgreSQL when BUDGET_TEST_POSTGRES names a server.
var applyTargets = moveTargets

// writeFile writes data to a new file of t's and returns its path.
func writeFile(t *testing.T, name, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// auditCount is how many entries db's audit log holds.
func auditCount(t *testing.T, db string) int {
	t.Helper()
	v := decode(t, mustRun(t, 0, "audit", "ls", "--db", db, "--json").stdout)
	return len(v["entries"].([]any))
}

// applied is config apply's output lines.
func applied(t *testing.T, want int, db string, args ...string) []string {
	t.Helper()
	out := mustRun(t, want, append([]string{"config", "apply", "--db", db}, args...)...).stdout
	return strings.Split(strings.TrimSuffix(out, "\n"), "\n")
}

// onAppliedTargets runs fn on each target database once moveOrigin's
// exported configuration (doc, in file) is applied to it.
func onAppliedTargets(t *testing.T, fn func(t *testing.T, db, doc, file string)) {
	t.Helper()
	origin, _ := moveOrigin(t)
	doc := mustRun(t, 0, "config", "export", "--db", origin).stdout
	file := writeFile(t, "budget.json", doc)
	for _, target := range applyTargets {
		t.Run(target.name, func(t *testing.T) {
			db := target.fresh(t)
			applied(t, 0, db, file)
			fn(t, db, doc, file)
		})
	}
}

// An export applied to the database it came from changes nothing; applied
// to a new database it recreates the same configuration, and a second
// apply there is a no-op that logs nothing.
func TestConfigApplyExportIsANoOp(t *testing.T) {
	t.Parallel()
	origin, _ := moveOrigin(t)
	doc := mustRun(t, 0, "config", "export", "--db", origin).stdout
	file := writeFile(t, "budget.json", doc)
	n := auditCount(t, origin)
	if got := applied(t, 0, origin, file); !slices.Equal(got, []string{"no changes"}) {
		t.Fatalf("apply of its own export: %q; want no changes", got)
	}
	if auditCount(t, origin) != n {
		t.Fatal("a no-op apply logged audit entries")
	}
	for _, target := range applyTargets {
		t.Run(target.name, func(t *testing.T) {
			db := target.fresh(t)
			if got := applied(t, 0, db, file); len(got) < 15 || got[0] == "no changes" {
				t.Fatalf("apply to a new database: %q; want every definition created", got)
			}
			if got := mustRun(t, 0, "config", "export", "--db", db).stdout; got != doc {
				t.Fatalf("export after apply:\n%s\nwant the document applied:\n%s", got, doc)
			}
			n := auditCount(t, db)
			for i := 0; i < 2; i++ {
				if got := applied(t, 0, db, file); !slices.Equal(got, []string{"no changes"}) {
					t.Fatalf("apply %d again: %q; want no changes", i+2, got)
				}
			}
			if auditCount(t, db) != n {
				t.Fatal("no-op applies logged audit entries")
			}
			v := decode(t, mustRun(t, 0, "audit", "ls", "--db", db, "--limit", "1", "--json").stdout)
			if e := v["entries"].([]any)[0].(map[string]any); e["actor"] != "config "+file {
				t.Errorf("apply's entries are by %v; want config %s", e["actor"], file)
			}
		})
	}
}

// editDoc decodes a config document, lets edit change it, and writes it
// back to a file.
func editDoc(t *testing.T, doc string, edit func(map[string]any)) string {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatal(err)
	}
	edit(v)
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, "edited.json", string(b))
}

// limitIn is the document's limit with id.
func limitIn(v map[string]any, id string) map[string]any {
	for _, x := range v["limits"].([]any) {
		if l := x.(map[string]any); l["id"] == id {
			return l
		}
	}
	return nil
}

// k1day is the used and limit of limit k1day in inspect --json at testNow.
func k1day(t *testing.T, db string) (used, max any) {
	t.Helper()
	v := decode(t, mustRun(t, 0, "inspect", "--db", db, "--at", testNow.Format(time.RFC3339), "--json").stdout)
	for _, x := range v["limits"].([]any) {
		if l := x.(map[string]any); l["id"] == "k1day" {
			return l["used"], l["limit"]
		}
	}
	t.Fatal("no limit k1day")
	return nil, nil
}

// A changed max changes only that: the limit keeps its id (matched by
// identity, whatever id the document gives it) and its usage.
func TestConfigApplyChangedMaxKeepsUsage(t *testing.T) {
	t.Parallel()
	onAppliedTargets(t, func(t *testing.T, db, doc, _ string) {
		mustRun(t, 0, "record", "--db", db, "--key", "k1", "--provider", "openai", "--model", "gpt-4o", "--input", "700", "--at", testNow.Format(time.RFC3339))
		if used, max := k1day(t, db); used != 700.0 || max != 1000000.0 {
			t.Fatalf("k1day before the apply: used %v of %v; want 700 of 1000000", used, max)
		}
		file := editDoc(t, doc, func(v map[string]any) {
			l := limitIn(v, "k1day")
			l["limit"] = 2000000
			l["id"] = "some-other-id"
		})
		if got := applied(t, 0, db, file); !slices.Equal(got, []string{"~ limit k1day: limit 1000000 -> 2000000"}) {
			t.Fatalf("apply of a changed max: %q", got)
		}
		if used, max := k1day(t, db); used != 700.0 || max != 2000000.0 {
			t.Fatalf("k1day after the apply: used %v of %v; want 700 of 2000000 (its counter kept)", used, max)
		}
		if got := applied(t, 0, db, file); !slices.Equal(got, []string{"no changes"}) {
			t.Fatalf("the same apply again: %q", got)
		}
	})
}

// --prune deletes exactly what the document does not name (and revokes
// its live gateway keys); without it nothing is deleted; --dry-run prints
// the same and writes nothing.
func TestConfigApplyPrune(t *testing.T) {
	t.Parallel()
	onAppliedTargets(t, func(t *testing.T, db, doc, file string) {
		mustRun(t, 0, "team", "set", "--db", db, "extra-team")
		mustRun(t, 0, "limit", "set", "--db", db, "--team", "extra-team", "--window", "daily", "--limit", "5", "--id", "extra-limit")
		mustRun(t, 0, "key", "add", "--db", db, "extra-key")
		mustRun(t, 0, "price", "set", "--db", db, "--provider", "mistral", "--model", "small", "--input", "1", "--output", "2", "--from", "2026-01-01T00:00:00Z")
		if got := applied(t, 0, db, file); !slices.Equal(got, []string{"no changes"}) {
			t.Fatalf("apply without --prune: %q; want no changes", got)
		}
		exported := mustRun(t, 0, "config", "export", "--db", db).stdout
		want := []string{
			"- team extra-team",
			"- limit extra-limit",
			"- price mistral/small/default/0/2026-01-01T00:00:00Z",
			"~ key extra-key: revoked_at null -> \"" + testNow.Format(time.RFC3339) + "\"",
		}
		for i := 0; i < 2; i++ {
			if got := applied(t, 0, db, file, "--prune", "--dry-run"); !slices.Equal(got, want) {
				t.Fatalf("--prune --dry-run: %q\nwant %q", got, want)
			}
		}
		if got := mustRun(t, 0, "config", "export", "--db", db).stdout; got != exported {
			t.Fatal("--dry-run wrote")
		}
		if got := applied(t, 0, db, file, "--prune"); !slices.Equal(got, want) {
			t.Fatalf("--prune: %q\nwant %q", got, want)
		}
		if got := applied(t, 0, db, file, "--prune"); !slices.Equal(got, []string{"no changes"}) {
			t.Fatalf("--prune again: %q; want no changes", got)
		}
		var v struct {
			Keys []struct {
				Name      string  `json:"name"`
				RevokedAt *string `json:"revoked_at"`
			} `json:"keys"`
		}
		if err := json.Unmarshal([]byte(mustRun(t, 0, "config", "export", "--db", db).stdout), &v); err != nil {
			t.Fatal(err)
		}
		for _, k := range v.Keys {
			if k.Name == "extra-key" && k.RevokedAt == nil {
				t.Error("extra-key is still live after --prune")
			}
		}
	})
}

// A document that does not parse, or that is invalid anywhere, changes
// nothing and logs nothing.
func TestConfigApplyMalformedChangesNothing(t *testing.T) {
	t.Parallel()
	onAppliedTargets(t, func(t *testing.T, db, doc, file string) {
		exported, n := mustRun(t, 0, "config", "export", "--db", db).stdout, auditCount(t, db)
		bad := []string{
			writeFile(t, "cut.json", doc[:len(doc)/2]),
			writeFile(t, "bad.yaml", "version: 1\nlimits: [\n"),
			writeFile(t, "unknown.yaml", "version: 1\nlimitz: []\n"),
			editDoc(t, doc, func(v map[string]any) { limitIn(v, "k1day")["window"] = "fortnightly" }),
			editDoc(t, doc, func(v map[string]any) { limitIn(v, "engusd")["owner"] = "no-such-team" }),
			editDoc(t, doc, func(v map[string]any) {
				limitIn(v, "k1day")["limit"] = 5 // a good change before a bad one
				v["keys"].([]any)[0].(map[string]any)["hash"] = "nope"
			}),
		}
		for _, f := range bad {
			r := mustRun(t, 2, "config", "apply", "--db", db, f, "--prune")
			if r.stdout != "" {
				t.Errorf("%s: stdout %q; want nothing", filepath.Base(f), r.stdout)
			}
		}
		if got := mustRun(t, 0, "config", "export", "--db", db).stdout; got != exported {
			t.Fatal("a malformed document changed the database")
		}
		if auditCount(t, db) != n {
			t.Fatal("a malformed document logged audit entries")
		}
	})
}

// YAML is read as the JSON it stands for, and a document exported after a
// key's rotation applies cleanly: the new hash replaces the stored one, so
// the new secret works in the target database.
func TestConfigApplyYAMLAfterRotation(t *testing.T) {
	t.Parallel()
	origin, _ := moveOrigin(t)
	doc := mustRun(t, 0, "config", "export", "--db", origin).stdout
	y, err := yaml.JSONToYAML([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	db := tempDB(t)
	applied(t, 0, db, writeFile(t, "budget.yaml", string(y)))
	if got := mustRun(t, 0, "config", "export", "--db", db).stdout; got != doc {
		t.Fatalf("export after a YAML apply:\n%s\nwant:\n%s", got, doc)
	}
	secret := strings.TrimSpace(mustRun(t, 0, "key", "rotate", "--db", origin, "gw", "--grace", "0s").stdout)
	file := writeFile(t, "rotated.json", mustRun(t, 0, "config", "export", "--db", origin).stdout)
	got := applied(t, 0, db, file)
	if len(got) != 1 || !strings.HasPrefix(got[0], "~ key gw: ") || !strings.Contains(got[0], `secret null -> "replaced"`) {
		t.Fatalf("apply after a rotation: %q; want the key's secret replaced", got)
	}
	if name, err := lookupAt(t, db, secret, testNow); err != nil || name != "gw" {
		t.Fatalf("the rotated secret in the target: %q, %v; want gw", name, err)
	}
	if got := applied(t, 0, db, file); !slices.Equal(got, []string{"no changes"}) {
		t.Fatalf("apply again: %q", got)
	}
}
