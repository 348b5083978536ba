package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/proxy"
)

// TestKeyCommands: add shows the secret once and stores only its hash; ls
// lists names; revoke makes the key unusable; exit codes per contract.
func TestKeyCommands(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 1, "key", "ls", "--db", db) // read-only: a missing db is exit 1
	if exists(db) {
		t.Fatal("key ls created the database")
	}
	v := decode(t, mustRun(t, 0, "key", "add", "team-a", "--db", db, "--json").stdout)
	wantKeys(t, "key add --json", v, "name", "secret")
	secret, _ := v["secret"].(string)
	if v["name"] != "team-a" || !strings.HasPrefix(secret, proxy.KeyPrefix) || len(secret) < 40 {
		t.Errorf("key add --json: got %v", v)
	}
	if st, err := os.Stat(db); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key add: database mode %v %v; want 0600", st.Mode().Perm(), err)
	}
	r := mustRun(t, 0, "key", "add", "team-b", "--db", db)
	other := strings.TrimSpace(r.stdout)
	if !strings.HasPrefix(other, proxy.KeyPrefix) || strings.Contains(r.stdout, " ") || !strings.Contains(r.stderr, "not shown again") {
		t.Errorf("key add: stdout %q stderr %q", r.stdout, r.stderr)
	}
	if r := mustRun(t, 2, "key", "add", "team-a", "--db", db); !strings.Contains(r.stderr, "team-a") {
		t.Errorf("duplicate name: stderr %q", r.stderr)
	}
	for _, bad := range [][]string{{"key", "add"}, {"key", "add", "a b"}, {"key", "add", "x", "y"}, {"key", "revoke"}, {"key"}, {"key", "nope"}} {
		bad = append(bad, "--db", tempDB(t))
		mustRun(t, 2, bad...)
	}
	body := mustRun(t, 0, "key", "ls", "--db", db, "--json").stdout
	if strings.Contains(body, secret) || strings.Contains(body, proxy.HashKey(secret)) {
		t.Errorf("key ls shows a secret or hash: %s", body)
	}
	ks, _ := decode(t, body)["keys"].([]any)
	if len(ks) != 2 {
		t.Fatalf("key ls --json: got %s", body)
	}
	wantKeys(t, "key ls --json key", ks[0], keyFields...)
	if k := ks[0].(map[string]any); k["name"] != "team-a" || k["created_at"] != ts(testNow) || k["revoked"] != false ||
		k["state"] != "active" || k["last_used_at"] != nil || k["rotating_until"] != nil || k["revoked_at"] != nil {
		t.Errorf("key ls --json: got %v", k)
	}

	// The stored hash finds the key; revocation makes it unknown.
	ctx := context.Background()
	lookup := func() error {
		d, err := tokenbudget.Open(ctx, db, tokenbudget.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close(ctx)
		name, err := proxy.NewKeys(d.KeyStore()).Lookup(ctx, secret)
		if err == nil && name != "team-a" {
			t.Errorf("lookup: got %q", name)
		}
		return err
	}
	if err := lookup(); err != nil {
		t.Fatalf("lookup of a new key: %v", err)
	}
	if r := mustRun(t, 0, "key", "revoke", "team-a", "--db", db); r.stdout != "team-a revoked\n" {
		t.Errorf("key revoke: %q", r.stdout)
	}
	if r := mustRun(t, 0, "key", "revoke", "team-a", "--db", db); r.stdout != "team-a was already revoked\n" {
		t.Errorf("second key revoke: %q", r.stdout)
	}
	mustRun(t, 4, "key", "revoke", "nobody", "--db", db)
	if err := lookup(); err != proxy.ErrUnknownKey {
		t.Errorf("lookup of a revoked key: %v", err)
	}
	if out := mustRun(t, 0, "key", "ls", "--db", db).stdout; !strings.Contains(out, "team-a") || !strings.Contains(out, ts(testNow)) ||
		!strings.Contains(out, "REVOKED AT") || !strings.Contains(out, "revoked") {
		t.Errorf("key ls: %s", out)
	}
}

var keyFields = []string{"name", "team", "created_at", "revoked", "state", "revoked_at", "rotating_until", "last_used_at", "expires_at", "models"}

// lookupAt opens db and looks secret up as a proxy would at now: the key's
// name, or the error.
func lookupAt(t *testing.T, db, secret string, now time.Time) (string, error) {
	t.Helper()
	ctx := context.Background()
	d, err := tokenbudget.Open(ctx, db, tokenbudget.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	keys := proxy.NewKeys(d.KeyStore())
	keys.Now = func() time.Time { return now }
	defer keys.Wait()
	return keys.Lookup(ctx, secret)
}

// TestKeyRotate: rotate prints a new secret (JSON as key add's); the old
// one works until the grace ends (default 1h; 0s: at once), the new one at
// once; the name keeps its limits and the usage counted in their windows;
// key ls shows the key rotating until then. Unknown name exit 4, revoked 2,
// negative grace 2.
func TestKeyRotate(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	old := strings.TrimSpace(mustRun(t, 0, "key", "add", "app", "--db", db).stdout)
	mustRun(t, 0, "limit", "set", "--key", "app", "--limit", "1000", "--window", "daily", "--db", db)
	mustRun(t, 0, "record", "--key", "app", "--provider", "openai", "--model", "gpt-4o", "--input", "300", "--db", db)
	r := mustRun(t, 0, "key", "rotate", "app", "--db", db)
	fresh := strings.TrimSpace(r.stdout)
	if !strings.HasPrefix(fresh, proxy.KeyPrefix) || fresh == old || strings.Count(r.stdout, "\n") != 1 ||
		!strings.Contains(r.stderr, ts(testNow.Add(time.Hour))) {
		t.Errorf("key rotate: stdout %q stderr %q; want only the new secret, the grace's end on stderr", r.stdout, r.stderr)
	}
	for _, c := range []struct {
		secret string
		at     time.Time
		ok     bool
	}{
		{old, testNow, true}, {fresh, testNow, true},
		{old, testNow.Add(time.Hour - time.Second), true},
		{old, testNow.Add(time.Hour), false}, {fresh, testNow.Add(time.Hour), true},
	} {
		name, err := lookupAt(t, db, c.secret, c.at)
		if ok := err == nil && name == "app"; ok != c.ok {
			t.Errorf("secret %s at %s: got %q %v; want usable %v", c.secret[:8], c.at.Format(time.RFC3339), name, err, c.ok)
		}
	}
	ks, _ := decode(t, mustRun(t, 0, "key", "ls", "--json", "--db", db).stdout)["keys"].([]any)
	if k := ks[0].(map[string]any); k["state"] != "rotating" || k["rotating_until"] != ts(testNow.Add(time.Hour)) {
		t.Errorf("key ls while rotating: %v", k)
	}
	if out := mustRun(t, 0, "key", "ls", "--db", db).stdout; !strings.Contains(out, "rotating until "+ts(testNow.Add(time.Hour))) {
		t.Errorf("key ls: %s", out)
	}
	if k := decode(t, mustRunAt(t, testNow.Add(2*time.Hour), 0, "key", "ls", "--json", "--db", db).stdout)["keys"].([]any)[0].(map[string]any); k["state"] != "active" {
		t.Errorf("key ls after the grace: %v", k)
	}

	// --grace 0s: the old secret stops at once; --json as key add's.
	v := decode(t, mustRun(t, 0, "key", "rotate", "app", "--grace", "0s", "--json", "--db", db).stdout)
	wantKeys(t, "key rotate --json", v, "name", "secret")
	newest, _ := v["secret"].(string)
	if _, err := lookupAt(t, db, fresh, testNow); err != proxy.ErrUnknownKey {
		t.Errorf("old secret after --grace 0s: %v; want ErrUnknownKey", err)
	}
	if name, err := lookupAt(t, db, newest, testNow); name != "app" || err != nil {
		t.Errorf("new secret: %q %v", name, err)
	}
	// Same name, same limit, same window: the usage before the rotation counts.
	st := decode(t, mustRun(t, 0, "inspect", "--key", "app", "--json", "--db", db).stdout)
	if lim := st["limits"].([]any)[0].(map[string]any); lim["used"] != 300.0 || lim["key"] != "app" {
		t.Errorf("after rotation: limit %v; want the key's limit with its 300 used", lim)
	}

	mustRun(t, 4, "key", "rotate", "nobody", "--db", db)
	mustRun(t, 2, "key", "rotate", "app", "--grace", "-1s", "--db", db)
	mustRun(t, 0, "key", "revoke", "app", "--db", db)
	if r := mustRun(t, 2, "key", "rotate", "app", "--db", db); !strings.Contains(r.stderr, "--reuse") {
		t.Errorf("rotate a revoked key: stderr %q; want a hint at key add --reuse", r.stderr)
	}
}

// TestKeyReuse: a revoked name is refused by key add (exit 2) and taken
// again with --reuse: a new secret, the revoked one still refused, the
// name's limits and counted usage kept. --reuse on a live key's name is
// exit 2; on a new name it creates the key.
func TestKeyReuse(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	old := strings.TrimSpace(mustRun(t, 0, "key", "add", "app", "--db", db).stdout)
	mustRun(t, 0, "limit", "set", "--key", "app", "--limit", "1000", "--window", "daily", "--db", db)
	mustRun(t, 0, "record", "--key", "app", "--provider", "openai", "--model", "gpt-4o", "--input", "300", "--db", db)
	if r := mustRun(t, 2, "key", "add", "app", "--reuse", "--db", db); !strings.Contains(r.stderr, "app") {
		t.Errorf("--reuse of a live name: stderr %q", r.stderr)
	}
	mustRun(t, 0, "key", "revoke", "app", "--db", db)
	mustRun(t, 2, "key", "add", "app", "--db", db)
	v := decode(t, mustRun(t, 0, "key", "add", "app", "--reuse", "--json", "--db", db).stdout)
	fresh, _ := v["secret"].(string)
	if v["name"] != "app" || !strings.HasPrefix(fresh, proxy.KeyPrefix) {
		t.Fatalf("key add --reuse --json: %v", v)
	}
	if name, err := lookupAt(t, db, fresh, testNow); name != "app" || err != nil {
		t.Errorf("reused name, new secret: %q %v", name, err)
	}
	if _, err := lookupAt(t, db, old, testNow); err != proxy.ErrUnknownKey {
		t.Errorf("the revoked secret: %v; want ErrUnknownKey", err)
	}
	if k := decode(t, mustRun(t, 0, "key", "ls", "--json", "--db", db).stdout)["keys"].([]any)[0].(map[string]any); k["state"] != "active" || k["revoked"] != false {
		t.Errorf("key ls after reuse: %v", k)
	}
	st := decode(t, mustRun(t, 0, "inspect", "--key", "app", "--json", "--db", db).stdout)
	if lim := st["limits"].([]any)[0].(map[string]any); lim["used"] != 300.0 {
		t.Errorf("after reuse: limit %v; want its 300 used", lim)
	}
	if r := mustRun(t, 0, "key", "add", "other", "--reuse", "--db", db); !strings.HasPrefix(r.stdout, proxy.KeyPrefix) {
		t.Errorf("--reuse of a new name: %q", r.stdout)
	}
}

// TestKeyLsTeamAndReuseHint: key ls shows each key's team (JSON "team",
// null for none), and key add of a revoked key's name says --reuse takes it.
func TestKeyLsTeamAndReuseHint(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "team", "set", "--db", db, "eng")
	mustRun(t, 0, "key", "add", "--db", db, "app", "--team", "eng")
	mustRun(t, 0, "key", "add", "--db", db, "solo")
	out := mustRun(t, 0, "key", "ls", "--db", db).stdout
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "TEAM") || !strings.Contains(lines[1], "eng") || strings.Contains(lines[2], "eng") {
		t.Errorf("key ls: got\n%s\nwant a TEAM column with eng for app only", out)
	}
	ks := decode(t, mustRun(t, 0, "key", "ls", "--db", db, "--json").stdout)["keys"].([]any)
	if a, s := ks[0].(map[string]any), ks[1].(map[string]any); a["team"] != "eng" || s["team"] != nil || !hasKey(s, "team") {
		t.Errorf("key ls --json: got %v; want team eng for app, null for solo", ks)
	}
	mustRun(t, 0, "key", "revoke", "--db", db, "solo")
	if r := mustRun(t, 2, "key", "add", "--db", db, "solo"); !strings.Contains(r.stderr, "solo") || !strings.Contains(r.stderr, "--reuse") {
		t.Errorf("key add of a revoked name: stderr %q; want it to suggest --reuse", r.stderr)
	}
	if r := mustRun(t, 2, "key", "add", "--db", db, "app"); strings.Contains(r.stderr, "--reuse") {
		t.Errorf("key add of a live name: stderr %q; want no --reuse hint (reuse refuses a live key)", r.stderr)
	}
}

func hasKey(m map[string]any, k string) bool { _, ok := m[k]; return ok }

func TestKeyAddExpiresAndModels(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	past := testNow.Add(-time.Second).Format(time.RFC3339)
	r := mustRun(t, 2, "key", "add", "--db", db, "app", "--expires", past)
	if !strings.Contains(r.stderr, "expires") {
		t.Errorf("a past --expires: %q; want an error naming expires", r.stderr)
	}
	r = mustRun(t, 2, "key", "add", "--db", db, "app", "--expires", "tomorrow")
	if !strings.Contains(r.stderr, "expires") {
		t.Errorf("a bad --expires: %q; want an error naming expires", r.stderr)
	}
	mustRun(t, 2, "key", "add", "--db", db, "app", "--models", "gpt-4o,,o3")
	if exists(db) {
		t.Fatal("refused adds created the database")
	}
	exp := testNow.Add(48 * time.Hour)
	mustRun(t, 0, "key", "add", "--db", db, "app", "--expires", exp.Format(time.RFC3339), "--models", "gpt-4o*, Claude-3-5-Haiku")
	v := decode(t, mustRun(t, 0, "key", "ls", "--db", db, "--json").stdout)
	k := v["keys"].([]any)[0].(map[string]any)
	if k["expires_at"] != ts(exp) || strings.Join(strs(k["models"]), ",") != "gpt-4o*,claude-3-5-haiku" || k["state"] != "active" {
		t.Errorf("key ls --json: %v; want expires_at %s, models normalised", k, ts(exp))
	}
	v = decode(t, mustRun(t, 0, "key", "ls", "--db", db, "--json", "--at", exp.Format(time.RFC3339)).stdout)
	if k := v["keys"].([]any)[0].(map[string]any); k["state"] != "expired" {
		t.Errorf("key ls at its expiry: state %v; want expired", k["state"])
	}
	mustRun(t, 0, "key", "add", "--db", db, "zz-free")
	v = decode(t, mustRun(t, 0, "key", "ls", "--db", db, "--json").stdout)
	if k := v["keys"].([]any)[1].(map[string]any); k["name"] != "zz-free" || k["expires_at"] != nil || len(k["models"].([]any)) != 0 {
		t.Errorf("a key without rules: %v; want expires_at null, models []", k)
	}
}

func TestKeySetChangesOnlyTheRulesGiven(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	exp := testNow.Add(time.Hour).Format(time.RFC3339)
	secret := strings.TrimSpace(mustRun(t, 0, "key", "add", "--db", db, "app", "--models", "gpt-4o").stdout)
	mustRun(t, 2, "key", "set", "--db", db, "app")
	mustRun(t, 2, "key", "set", "--db", db, "app", "--expires", testNow.Format(time.RFC3339))
	mustRun(t, 4, "key", "set", "--db", db, "nope", "--expires", exp)
	v := decode(t, mustRun(t, 0, "key", "set", "--db", db, "app", "--expires", exp, "--json").stdout)
	wantKeys(t, "key set --json", v, keyFields...)
	if v["expires_at"] != exp || strings.Join(strs(v["models"]), ",") != "gpt-4o" {
		t.Fatalf("key set --expires: %v; want the expiry set, the models kept", v)
	}
	v = decode(t, mustRun(t, 0, "key", "set", "--db", db, "app", "--models", "any", "--json").stdout)
	if v["expires_at"] != exp || len(v["models"].([]any)) != 0 {
		t.Fatalf("key set --models any: %v; want the expiry kept, any model", v)
	}
	v = decode(t, mustRun(t, 0, "key", "set", "--db", db, "app", "--expires", "never", "--json").stdout)
	if v["expires_at"] != nil {
		t.Fatalf("key set --expires never: %v", v)
	}
	if name, err := lookupAt(t, db, secret, testNow); err != nil || name != "app" {
		t.Fatalf("the key's secret after key set: %q, %v", name, err)
	}
	if n := auditCount(t, db); n != 4 {
		t.Fatalf("%d audit entries; want 4 (add and three changes)", n)
	}
}
