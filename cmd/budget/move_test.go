package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver, for a fresh schema
)

// moveTargets are the kinds of database a history is moved into: a
// fresh SQLite file, and a fresh PostgreSQL schema when
// BUDGET_TEST_POSTGRES names a server.
var moveTargets = []struct {
	name  string
	fresh func(t *testing.T) string
}{
	{"sqlite", func(t *testing.T) string { return tempDB(t) }},
	{"postgres", freshPostgres},
}

// freshPostgres creates an empty schema on BUDGET_TEST_POSTGRES's server,
// dropped when the test ends, and returns the DSN selecting it.
func freshPostgres(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("BUDGET_TEST_POSTGRES")
	if dsn == "" {
		t.Skip("BUDGET_TEST_POSTGRES is not set")
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("BUDGET_TEST_POSTGRES must be a postgres:// URL")
	}
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	name := fmt.Sprintf("tbmove_%d_%d", os.Getpid(), rand.Uint64())
	if _, err := admin.Exec(`CREATE SCHEMA ` + name); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(`DROP SCHEMA ` + name + ` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// moveOrigin is a database with every kind of definition (key, team, org,
// default, per-user, once with raises, concurrent, disabled and usd
// limits; prices; teams in an org and in none; live, rotated and revoked
// gateway keys) and a history with priced and unpriced events, end users,
// explicit teams, an expired charged reservation and its late commit. It
// returns the gateway keys' secrets by name (rot's new one, and the one
// it replaced as "rot-old").
func moveOrigin(t *testing.T) (db string, secrets map[string]string) {
	t.Helper()
	db = tempDB(t)
	secrets = map[string]string{}
	cli := func(args ...string) string { return mustRun(t, 0, append(args, "--db", db)...).stdout }
	cli("price", "set", "--provider", "openai", "--model", "gpt-4o", "--input", "2.5", "--output", "10", "--from", "2026-01-01T00:00:00Z")
	cli("price", "set", "--provider", "openai", "--model", "gpt-4o", "--input", "2", "--output", "8", "--cache-read", "1.25", "--from", "2026-02-25T00:00:00.5Z")
	cli("price", "set", "--provider", "anthropic", "--model", "claude", "--input", "3", "--output", "15", "--from", "2026-02-24T00:00:00Z")
	cli("team", "set", "eng", "--org", "acme")
	cli("team", "set", "ops")
	secrets["gw"] = strings.TrimSpace(cli("key", "add", "gw", "--team", "eng"))
	secrets["rot-old"] = strings.TrimSpace(cli("key", "add", "rot"))
	secrets["rot"] = strings.TrimSpace(cli("key", "rotate", "rot", "--grace", "1h"))
	secrets["old"] = strings.TrimSpace(cli("key", "add", "old"))
	cli("key", "revoke", "old")
	cli("key", "set-team", "k1", "eng")
	cli("key", "set-team", "k2", "ops")
	for _, l := range [][]string{
		{"--key", "k1", "--limit", "1000000", "--window", "daily", "--id", "k1day"},
		{"--key", "k1", "--scope", "provider", "--value", "openai", "--limit", "500000", "--window", "1h", "--id", "k1hour"},
		{"--key", "k2", "--scope", "model", "--value", "claude", "--metric", "requests", "--limit", "1000", "--window", "weekly",
			"--tz", "Europe/Paris", "--reset-time", "09:00", "--id", "k2week"},
		{"--team", "eng", "--metric", "usd", "--limit", "100", "--window", "monthly", "--id", "engusd"},
		{"--org", "acme", "--limit", "9000000", "--window", "monthly", "--tz", "America/New_York", "--id", "acmemonth"},
		{"--default", "--limit", "800000", "--window", "daily", "--id", "defday", "--alert", "50,90"},
		{"--key", "k0", "--scope", "user", "--value", "*", "--limit", "50000", "--window", "5h", "--id", "k0users"},
		{"--key", "k2", "--limit", "500000", "--window", "once", "--id", "k2bal"},
		{"--key", "gw", "--metric", "concurrent", "--limit", "4", "--id", "gwconc"},
		{"--key", "k1", "--metric", "output", "--limit", "10", "--window", "1m", "--id", "k1off", "--disabled"},
	} {
		cli(append([]string{"limit", "set"}, l...)...)
	}
	cli("limit", "raise", "k2bal", "--by", "1000")
	cli("limit", "raise", "k2bal", "--by", "5", "--until", "2026-04-01T00:00:00Z")
	mustImport(t, db, randomHistory(rand.New(rand.NewPCG(3, 4)), 300, time.Date(2026, 2, 20, 0, 0, 0, 0, time.UTC), 10))
	cli("record", "--key", "k2", "--provider", "anthropic", "--model", "claude", "--input", "40", "--user", "bob", "--at", "2026-03-02T13:00:00Z")
	// Charged on expiry, then committed late: the excess is a ":late" event.
	id := strings.TrimSpace(cli("reserve", "--key", "k2", "--provider", "anthropic", "--model", "claude", "--tokens", "30",
		"--ttl", "1m", "--on-expiry", "charge"))
	mustRunAt(t, testNow.Add(2*time.Minute), 0, "recover", "--db", db)
	mustRunAt(t, testNow.Add(2*time.Minute), 0, "commit", id, "--db", db, "--input", "25", "--output", "9")
	return db, secrets
}

// sameState fails unless databases a and b give the same history, the same
// configuration, the same reports and every limit the same status at each
// of the instants.
func sameState(t *testing.T, a, b string, instants ...string) {
	t.Helper()
	for _, args := range [][]string{
		{"export"},
		{"export", "--format", "csv"},
		{"config", "export"},
		{"report", "--since", "2026-01-01", "--until", "2026-04-01", "--by", "key,team,org,user,provider,model,day", "--format", "csv"},
		{"report", "--since", "2026-02-21T13:30:00Z", "--until", "2026-03-02T12:30:00Z", "--by", "team,week", "--format", "json"},
	} {
		if x, y := mustRun(t, 0, append(args, "--db", a)...).stdout, mustRun(t, 0, append(args, "--db", b)...).stdout; x != y {
			t.Errorf("budget %s differs:\n%s\nmoved:\n%s", strings.Join(args, " "), x, y)
		}
	}
	for _, at := range instants {
		x, y := inspectLimits(t, a, at), inspectLimits(t, b, at)
		if x != y {
			t.Errorf("inspect --at %s differs:\n%s\nmoved:\n%s", at, x, y)
		}
	}
}

// inspectLimits is the limits of inspect --json at at, as JSON.
func inspectLimits(t *testing.T, db, at string) string {
	t.Helper()
	v := decode(t, mustRun(t, 0, "inspect", "--db", db, "--at", at, "--json").stdout)
	b, _ := json.MarshalIndent(v["limits"], "", " ")
	return string(b)
}

var moveInstants = []string{"2026-02-20T00:00:00Z", "2026-02-23T08:59:59Z", "2026-02-25T17:42:00Z", "2026-02-28T23:00:00Z",
	"2026-03-01T04:00:00Z", "2026-03-02T12:00:00Z", "2026-03-02T13:30:00Z"}

// TestMoveDatabase: export and config export, then config import and
// import into a fresh database reproduce every counter,
// every report and the configuration; verify is clean and the gateway
// keys' secrets still authenticate.
func TestMoveDatabase(t *testing.T) {
	t.Parallel()
	origin, secrets := moveOrigin(t)
	mustRun(t, 0, "verify", "--db", origin)
	dir := t.TempDir()
	history, config := filepath.Join(dir, "usage.jsonl"), filepath.Join(dir, "config.json")
	writeOut(t, history, mustRun(t, 0, "export", "--db", origin))
	writeOut(t, config, mustRun(t, 0, "config", "export", "--db", origin))

	for _, target := range moveTargets {
		t.Run(target.name, func(t *testing.T) {
			t.Parallel()
			db := target.fresh(t)
			mustRun(t, 0, "config", "import", "--db", db, config)
			mustRun(t, 0, "import", "--db", db, history)
			if r := mustRun(t, 0, "verify", "--db", db); !strings.HasPrefix(r.stdout, "ok") {
				t.Errorf("verify after the move: %v", r)
			}
			sameState(t, origin, db, moveInstants...)
			// Both again: nothing changes.
			mustRun(t, 0, "config", "import", "--db", db, config)
			if r := mustRun(t, 0, "import", "--db", db, history); !strings.HasPrefix(r.stdout, "imported 0 events") {
				t.Errorf("second import: %v; want only duplicates", r)
			}
			sameState(t, origin, db, moveInstants[len(moveInstants)-1])
			checkSecrets(t, db, secrets)
		})
	}
}

func writeOut(t *testing.T, path string, r result) {
	t.Helper()
	if r.stderr != "" {
		t.Errorf("stderr: %s", r.stderr)
	}
	if err := os.WriteFile(path, []byte(r.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkSecrets proxies a request with each secret through a proxy on db:
// live keys and a rotated key's previous secret (within its grace) get
// through, a revoked key's secret gets 401. The proxy runs with its
// default leases, journaled on PostgreSQL in the state directory.
func checkSecrets(t *testing.T, db string, secrets map[string]string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env := map[string]string{"XDG_STATE_HOME": t.TempDir()}
	line, done := startCLI(t, ctx, env, "proxy", "--db", db, "--mock-upstream", "--listen", "127.0.0.1:0")
	base := listenURL(t, line)
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range secrets {
			if !yield(k) {
				return
			}
		}
	})
	for _, name := range names {
		want := http.StatusOK
		if name == "old" {
			want = http.StatusUnauthorized
		}
		if code, body := post(t, base+"/v1/chat/completions", secrets[name], `{"model":"gpt-4o","max_tokens":5,"messages":[]}`); code != want {
			t.Errorf("key %s after the move: %d %s; want %d", name, code, body, want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("proxy: %v", err)
	}
}

// TestConfigDocument: config export writes every field, and config import
// refuses bad documents (exit 2, naming the entry and field) before it
// creates or writes anything.
func TestConfigDocument(t *testing.T) {
	t.Parallel()
	origin, _ := moveOrigin(t)
	out := mustRun(t, 0, "config", "export", "--db", origin).stdout
	v := decode(t, out)
	wantKeys(t, "config", v, "version", "limits", "prices", "teams", "keys")
	if v["version"] != 1.0 {
		t.Errorf("version: got %v; want 1", v["version"])
	}
	byID := map[string]map[string]any{}
	for _, l := range v["limits"].([]any) {
		l := l.(map[string]any)
		wantKeys(t, "config limit", l, "id", "level", "owner", "scope", "scope_value", "metric", "limit", "window", "reset_time",
			"timezone", "anchor", "enabled", "raises", "alerts")
		byID[l["id"].(string)] = l
	}
	if l := byID["k2bal"]; l["anchor"] != testNow.Format(time.RFC3339Nano) || l["limit"] != 500000.0 || len(l["raises"].([]any)) != 2 {
		t.Errorf("once limit: got %v; want anchor %s, limit 500000 (the base), 2 raises", l, testNow.Format(time.RFC3339Nano))
	}
	if l := byID["engusd"]; l["limit"] != 100e6 || l["level"] != "team" || l["owner"] != "eng" {
		t.Errorf("usd team limit: got %v; want limit 100000000 micro-dollars, team eng", l)
	}
	if l := byID["defday"]; l["level"] != "default" || l["owner"] != nil || !slices.Equal(l["alerts"].([]any), []any{50.0, 90.0}) {
		t.Errorf("default limit: got %v; want level default, owner null, alerts [50 90]", l)
	}
	if l := byID["k1day"]; l["alerts"] == nil || len(l["alerts"].([]any)) != 0 {
		t.Errorf("a limit without alerts: got %v; want alerts []", l)
	}
	if l := byID["k1off"]; l["enabled"] != false {
		t.Errorf("disabled limit: got %v", l)
	}
	if l := byID["gwconc"]; l["window"] != nil || l["reset_time"] != nil {
		t.Errorf("concurrent limit: got %v; want window null", l)
	}
	if l := byID["k2week"]; l["reset_time"] != "09:00" || l["timezone"] != "Europe/Paris" {
		t.Errorf("weekly limit: got %v", l)
	}
	keys := v["keys"].([]any)
	for _, k := range keys {
		wantKeys(t, "config key", k, "name", "hash", "created_at", "revoked_at", "prev_hash", "prev_until")
	}
	if len(keys) != 3 || keys[1].(map[string]any)["revoked_at"] == nil || keys[2].(map[string]any)["prev_hash"] == nil {
		t.Errorf("keys: got %v; want gw, old (revoked), rot (rotated)", keys)
	}
	for _, tm := range v["teams"].([]any) {
		wantKeys(t, "config team", tm, "name", "org", "keys")
	}
	if p := v["prices"].([]any)[2].(map[string]any); p["from"] != "2026-02-25T00:00:00.5Z" || p["cache_read"] != "1.25" {
		t.Errorf("price: got %v; want from with its fraction, cache_read \"1.25\"", p)
	}

	for _, tc := range []struct {
		name, old, new, want string
	}{
		{"no version", `"version": 1,`, "", "version"},
		{"version 2", `"version": 1,`, `"version": 2,`, "version"},
		{"unknown field", `"version": 1,`, `"version": 1, "colour": "red",`, "colour"},
		{"limit without id", `"id": "k1day"`, `"id": ""`, "id"},
		{"bad window", `"window": "5h"`, `"window": "5 hours"`, "window"},
		{"bad zone", `"timezone": "Europe/Paris"`, `"timezone": "Europe/Nowhere"`, "timezone"},
		{"bad level", `"level": "default"`, `"level": "everyone"`, "level"},
		{"bad metric", `"metric": "requests"`, `"metric": "words"`, "metric"},
		{"negative limit", `"limit": 800000`, `"limit": -1`, "limit"},
		{"bad price", `"input": "3.00"`, `"input": "three"`, "input"},
		{"bad hash", `"hash": "`, `"hash": "xyz`, "hash"},
		{"bad anchor", `"anchor": "2026`, `"anchor": "tomorrow`, "anchor"},
		{"duplicate limit", `"id": "k1hour"`, `"id": "k1day"`, "k1day"},
		{"raise without amount", `"by": 1000`, `"by": 0`, "by"},
		{"bad alert", `"alerts": [
        50,`, `"alerts": [
        0,`, "alert"},
		{"key in two teams", `"keys": [
        "gw",`, `"keys": [
        "k2", "gw",`, "k2"},
	} {
		if !strings.Contains(out, tc.old) {
			t.Fatalf("%s: %q is not in the document", tc.name, tc.old)
		}
		doc := strings.Replace(out, tc.old, tc.new, 1)
		fresh := tempDB(t)
		r := runStdin(t, doc, "config", "import", "--db", fresh, "-")
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) || exists(fresh) {
			t.Errorf("config import, %s: got %v; want exit 2 naming %s, no database", tc.name, r, tc.want)
		}
	}

	// A key of the same name with another secret is refused before
	// anything is written.
	other := tempDB(t)
	mustRun(t, 0, "key", "add", "gw", "--db", other)
	before := mustRun(t, 0, "config", "export", "--db", other).stdout
	if r := runStdin(t, out, "config", "import", "--db", other, "-"); r.code != 2 || !strings.Contains(r.stderr, "gw") {
		t.Errorf("config import over a key of another secret: got %v; want exit 2 naming gw", r)
	}
	if after := mustRun(t, 0, "config", "export", "--db", other).stdout; after != before {
		t.Errorf("a refused config import wrote:\n%s", after)
	}
	if r := run(t, "config", "export", "--db", tempDB(t)); r.code != 1 {
		t.Errorf("config export of a missing database: got %v; want exit 1", r)
	}
}
