package main

import (
	"os"
	"strings"
	"syscall"
	"testing"
)

// budget proxy --config applies the file before it serves and again on
// SIGHUP, logging each change; a file that no longer applies changes
// nothing and the proxy serves on; a bad file at start stops the start.
func TestProxyConfigAppliedAtStartAndOnSIGHUP(t *testing.T) {
	t.Parallel()
	bin := buildBudget(t)
	db := tempDB(t)
	file := writeFile(t, "budget.yaml", `version: 1
teams:
  - name: eng
    org: acme
    keys: [app]
limits:
  - id: engday
    level: team
    owner: eng
    limit: 1000
    window: daily
`)
	if code, out := exitOf(t, bin, "proxy", "--listen", "127.0.0.1:0", "--db", db, "--mock-upstream",
		"--config", writeFile(t, "bad.yaml", "version: 1\nlimits: [{id: x, level: team, owner: nope, limit: 1, window: daily}]\n")); code != 2 || !strings.Contains(out, "nope") {
		t.Fatalf("a bad --config at start: exit %d\n%s\nwant 2 naming the team", code, out)
	}
	p := startProxyProc(t, bin, "--db", db, "--mock-upstream", "--config", file)
	p.stderr.waitFor(t, "config applied", 1)
	if !strings.Contains(p.stderr.String(), "+ limit engday") {
		t.Fatalf("the start's changes are not logged:\n%s", p.stderr)
	}
	if got := limitMax(t, db, "engday"); got != 1000.0 {
		t.Fatalf("engday after start: limit %v; want 1000", got)
	}
	writeFileAt(t, file, strings.Replace(mustReadFile(t, file), "limit: 1000", "limit: 2000", 1))
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.stderr.waitFor(t, "config applied", 2)
	if !strings.Contains(p.stderr.String(), "~ limit engday: limit 1000 -> 2000") {
		t.Fatalf("the reload's change is not logged:\n%s", p.stderr)
	}
	if got := limitMax(t, db, "engday"); got != 2000.0 {
		t.Fatalf("engday after SIGHUP: limit %v; want 2000", got)
	}
	writeFileAt(t, file, "version: 1\nlimits: [{id: engday, level: team, owner: eng, limit: 5, window: fortnightly}]\n")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.stderr.waitFor(t, "config not applied", 1)
	if got := limitMax(t, db, "engday"); got != 2000.0 {
		t.Fatalf("engday after a bad reload: limit %v; want 2000 unchanged", got)
	}
	if code, body := call(t, "GET", p.url+"/healthz", ""); code != 200 {
		t.Fatalf("the proxy stopped serving after a bad reload: %d %s", code, body)
	}
}

// limitMax is limit id's limit in db's limit ls --json.
func limitMax(t *testing.T, db, id string) any {
	t.Helper()
	v := decode(t, mustRun(t, 0, "limit", "ls", "--db", db, "--json").stdout)
	for _, x := range v["limits"].([]any) {
		if l := x.(map[string]any); l["id"] == id {
			return l["limit"]
		}
	}
	t.Fatalf("no limit %s", id)
	return nil
}

func mustReadFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFileAt(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
