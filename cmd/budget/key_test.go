package main

import (
	"context"
	"os"
	"strings"
	"testing"

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
	wantKeys(t, "key ls --json key", ks[0], "name", "created_at", "revoked")
	if k := ks[0].(map[string]any); k["name"] != "team-a" || k["created_at"] != ts(testNow) || k["revoked"] != false {
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
		name, err := proxy.NewKeys(d.Store()).Lookup(ctx, secret)
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
		!strings.Contains(out, "REVOKED AT") {
		t.Errorf("key ls: %s", out)
	}
}
