package main

import (
	"strconv"
	"strings"
	"testing"
)

// TestNamesThatLie: a key, team, org or limit id with a bidirectional
// override or a zero-width character is refused (exit 2, the name quoted
// escaped) and nothing is written; a model or an end user with one (the
// clients' names) is recorded as sent, shown escaped in tables and exact
// in --json.
func TestNamesThatLie(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "team", "set", "--db", db, "ops")
	before := mustRun(t, 0, "limit", "ls", "--db", db, "--json").stdout
	keysBefore := mustRun(t, 0, "key", "ls", "--db", db, "--json").stdout
	teamsBefore := mustRun(t, 0, "team", "ls", "--db", db, "--json").stdout
	const rlo, zwsp = "\u202e", "\u200b"
	for _, c := range []struct {
		bad  string
		args []string
	}{
		{"ops" + rlo + "gnp.exe", []string{"key", "add", "ops" + rlo + "gnp.exe"}},
		{"ali" + zwsp + "ce", []string{"team", "set", "ali" + zwsp + "ce"}},
		{"ac" + rlo + "me", []string{"team", "set", "ops", "--org", "ac" + rlo + "me"}},
		{"k" + zwsp, []string{"key", "set-team", "k" + zwsp, "ops"}},
		{"l" + zwsp + "im", []string{"limit", "set", "--key", "demo", "--id", "l" + zwsp + "im", "--limit", "5", "--window", "daily"}},
		{"de" + rlo + "mo", []string{"limit", "set", "--key", "de" + rlo + "mo", "--limit", "5", "--window", "daily"}},
		{"op" + zwsp + "s", []string{"limit", "set", "--team", "op" + zwsp + "s", "--limit", "5", "--window", "daily"}},
	} {
		r := run(t, append(append([]string{}, c.args...), "--db", db)...)
		if quoted := strconv.Quote(c.bad); r.code != 2 || !strings.Contains(r.stderr, quoted) || strings.ContainsAny(r.stderr, rlo+zwsp) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 quoting %s escaped", c.args, r.code, r.stderr, quoted)
		}
	}
	if got := mustRun(t, 0, "limit", "ls", "--db", db, "--json").stdout; got != before {
		t.Errorf("refused names changed the limits: %s", got)
	}
	if got := mustRun(t, 0, "key", "ls", "--db", db, "--json").stdout; got != keysBefore {
		t.Errorf("refused names changed the keys: %s", got)
	}
	if got := mustRun(t, 0, "team", "ls", "--db", db, "--json").stdout; got != teamsBefore {
		t.Errorf("refused names changed the teams: %s", got)
	}

	model, user := "gpt-4o"+rlo+"txt.exe", "bob"+zwsp
	mustRun(t, 0, "record", "--db", db, "--key", "demo", "--provider", "openai", "--model", model, "--user", user,
		"--input", "10", "--output", "5", "--request-id", "r1", "--at", "2026-03-02T10:00:00Z")
	table := mustRun(t, 0, "report", "--db", db, "--by", "model,user", "--since", "2026-03-01", "--until", "2026-03-03").stdout
	if strings.ContainsAny(table, rlo+zwsp) || !strings.Contains(table, `gpt-4o\u202Etxt.exe`) || !strings.Contains(table, `bob\u200B`) {
		t.Errorf("the report table shows the client's names unescaped or not at all:\n%s", table)
	}
	js := mustRun(t, 0, "report", "--db", db, "--by", "model,user", "--since", "2026-03-01", "--until", "2026-03-03", "--format", "json").stdout
	var found bool
	for _, row := range decode(t, js)["rows"].([]any) {
		if r := row.(map[string]any); r["model"] == model && r["user"] == user {
			found = true
		}
	}
	if !found {
		t.Errorf("report --format json does not carry the names exactly: %s", js)
	}
}
