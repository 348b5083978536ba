package main

import (
	"os/user"
	"path/filepath"
	"strings"
	"testing"
)

// osUser is who the CLI's changes are logged as when $USER is unset (the
// tests' environment is empty).
func osUser(t *testing.T) string {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Skipf("no OS user: %v", err)
	}
	return "cli:" + u.Username
}

func TestAuditLsNamesTheCLIUser(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "team", "set", "--db", db, "eng", "--org", "acme")
	mustRun(t, 0, "key", "add", "--db", db, "app", "--team", "eng")
	id := strings.TrimSpace(mustRun(t, 0, "limit", "set", "--db", db, "--key", "app", "--window", "daily", "--limit", "100").stdout)
	mustRun(t, 0, "limit", "set", "--db", db, "--id", id, "--limit", "100") // no change: no entry
	mustRun(t, 0, "limit", "set", "--db", db, "--id", id, "--limit", "200")
	mustRun(t, 0, "admin", "token", "add", "--db", db, "lead", "--team", "eng")
	v := decode(t, mustRun(t, 0, "audit", "ls", "--db", db, "--json").stdout)
	wantKeys(t, "audit ls --json", v, "entries")
	var got []string
	who := osUser(t)
	for _, x := range v["entries"].([]any) {
		e := x.(map[string]any)
		wantKeys(t, "audit entry", e, "id", "at", "actor", "actor_kind", "action", "object", "object_id", "team", "org", "was_team", "was_org", "before", "after")
		if e["actor"] != who || e["actor_kind"] != "cli" {
			t.Errorf("entry %v: actor %v; want %s", e["object_id"], e["actor"], who)
		}
		got = append(got, e["action"].(string)+" "+e["object"].(string)+" "+e["object_id"].(string))
		// A key added to a team is made in it, in one transaction: one
		// entry, in the team's scope.
		if e["object"] == "key" && (e["team"] != "eng" || e["org"] != "acme") {
			t.Errorf("key entry %v: team %v org %v; want eng in acme", e["action"], e["team"], e["org"])
		}
	}
	want := []string{"create team eng", "create key app", "create limit " + id, "update limit " + id, "create admin_token lead"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("audit ls: %s\nwant: %s", strings.Join(got, "; "), strings.Join(want, "; "))
	}
	text := mustRun(t, 0, "audit", "ls", "--db", db).stdout
	for _, s := range []string{"ACTOR", who, "limit 100 -> 200", "update"} {
		if !strings.Contains(text, s) {
			t.Errorf("audit ls text lacks %q:\n%s", s, text)
		}
	}
	if strings.Contains(text, "hash") || strings.Contains(text, "tbk_") || strings.Contains(text, "tba_") {
		t.Errorf("audit ls shows a secret or hash:\n%s", text)
	}
	if out := mustRun(t, 0, "audit", "ls", "--db", db, "--since", "2200-01-01").stdout; out != "no audit entries\n" {
		t.Errorf("audit ls --since the future: %q; want no audit entries", out)
	}
	v = decode(t, mustRun(t, 0, "audit", "ls", "--db", db, "--limit", "1", "--json").stdout)
	if es := v["entries"].([]any); len(es) != 1 || es[0].(map[string]any)["object"] != "admin_token" {
		t.Errorf("audit ls --limit 1: %v; want only the newest entry", es)
	}
	mustRun(t, 2, "audit", "ls", "--db", db, "--since", "yesterday")
}

func TestAdminTokenAddLsRevoke(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "team", "set", "--db", db, "eng", "--org", "acme")
	mustRun(t, 2, "admin", "token", "add", "--db", db, "lead", "--team", "nope")
	mustRun(t, 2, "admin", "token", "add", "--db", db, "lead", "--team", "eng", "--org", "acme")
	mustRun(t, 2, "admin", "token", "add", "--db", db, "admin")
	mustRun(t, 2, "admin", "token", "add", "--db", db, "has space")
	r := mustRun(t, 0, "admin", "token", "add", "--db", db, "lead", "--team", "eng", "--read-only")
	secret := strings.TrimSpace(r.stdout)
	if !strings.HasPrefix(secret, "tba_") || strings.Count(r.stdout, "\n") != 1 || strings.Contains(r.stderr, secret) {
		t.Fatalf("admin token add: stdout %q stderr %q; want the secret alone on stdout", r.stdout, r.stderr)
	}
	mustRun(t, 2, "admin", "token", "add", "--db", db, "lead")
	v := decode(t, mustRun(t, 0, "admin", "token", "add", "--db", db, "org-admin", "--org", "acme", "--json").stdout)
	wantKeys(t, "admin token add --json", v, "name", "secret")
	v = decode(t, mustRun(t, 0, "admin", "token", "ls", "--db", db, "--json").stdout)
	wantKeys(t, "admin token ls --json", v, "tokens")
	toks := v["tokens"].([]any)
	if len(toks) != 2 {
		t.Fatalf("admin token ls: %v; want 2 tokens", toks)
	}
	lead := toks[0].(map[string]any)
	wantKeys(t, "admin token", lead, "name", "team", "org", "read_only", "created_at", "revoked_at")
	if lead["name"] != "lead" || lead["team"] != "eng" || lead["org"] != nil || lead["read_only"] != true || lead["revoked_at"] != nil {
		t.Errorf("lead = %v; want team eng, read-only, live", lead)
	}
	if text := mustRun(t, 0, "admin", "token", "ls", "--db", db).stdout; !strings.Contains(text, "team eng (read-only)") || !strings.Contains(text, "org acme") || strings.Contains(text, secret) {
		t.Errorf("admin token ls text:\n%s", text)
	}
	if out := mustRun(t, 0, "admin", "token", "revoke", "--db", db, "lead").stdout; out != "lead revoked\n" {
		t.Errorf("revoke: %q", out)
	}
	if out := mustRun(t, 0, "admin", "token", "revoke", "--db", db, "lead").stdout; out != "lead was already revoked\n" {
		t.Errorf("revoke again: %q", out)
	}
	mustRun(t, 4, "admin", "token", "revoke", "--db", db, "nobody")
	mustRun(t, 2, "admin", "nope")
}

// A backup holds the audit log as it was; a prune leaves it alone; a
// config export leaves it out.
func TestAuditKeptByBackupAndPrune(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "team", "set", "--db", db, "eng")
	mustRun(t, 0, "limit", "set", "--db", db, "--team", "eng", "--window", "daily", "--limit", "10")
	mustRun(t, 0, "record", "--db", db, "--key", "k", "--provider", "p", "--model", "m", "--input", "1", "--at", "2026-02-01T00:00:00Z")
	log := mustRun(t, 0, "audit", "ls", "--db", db, "--json").stdout
	out := filepath.Join(t.TempDir(), "copy.db")
	mustRun(t, 0, "backup", "--db", db, out)
	if got := mustRun(t, 0, "audit", "ls", "--db", out, "--json").stdout; got != log {
		t.Errorf("the backup's audit log:\n%s\nwant:\n%s", got, log)
	}
	mustRun(t, 0, "prune", "--db", db, "--before", "2026-02-25")
	if got := mustRun(t, 0, "audit", "ls", "--db", db, "--json").stdout; got != log {
		t.Errorf("the audit log after prune:\n%s\nwant:\n%s", got, log)
	}
	if doc := mustRun(t, 0, "config", "export", "--db", db).stdout; strings.Contains(doc, "audit") || strings.Contains(doc, "aud_") {
		t.Errorf("config export holds the audit log:\n%s", doc)
	}
}
