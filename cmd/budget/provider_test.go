package main

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
)

var providerFields = []string{"provider", "kind", "parked_at", "resume_at", "probe_failures"}

// TestProviderParkUnpark: park refuses checks, unpark lets them through.
func TestProviderParkUnpark(t *testing.T) {
	t.Parallel()
	db := reserveDB(t)
	chk := []string{"check", "--db", db, "--key", "demo", "--provider", "openai", "--model", "gpt-4o", "--json"}
	mustRun(t, 0, chk...)

	v := decode(t, mustRun(t, 0, "provider", "park", "openai", "--db", db, "--kind", "rate_limited", "--retry-after", "10m", "--json").stdout)
	wantKeys(t, "provider park --json", v, providerFields...)
	if v["provider"] != "openai" || v["kind"] != "rate_limited" || v["parked_at"] != ts(testNow) ||
		v["resume_at"] != ts(testNow.Add(10*time.Minute)) || v["probe_failures"] != 0.0 {
		t.Errorf("provider park --json: got %v", v)
	}
	v = decode(t, mustRun(t, 3, chk...).stdout)
	if p, _ := v["parked"].(map[string]any); p["provider"] != "openai" || p["retry_after_seconds"] != 600.0 {
		t.Errorf("check of a parked provider: got %v", v)
	}
	// Other providers are not affected.
	mustRun(t, 0, "check", "--db", db, "--key", "demo", "--provider", "anthropic")

	if r := mustRun(t, 0, "provider", "unpark", "openai", "--db", db); r.stdout != "openai unparked\n" {
		t.Errorf("provider unpark: got stdout %q", r.stdout)
	}
	mustRun(t, 0, chk...)
	// Unparking a provider that is not parked is no error.
	if r := mustRun(t, 0, "provider", "unpark", "openai", "--db", db); r.stdout != "openai was not parked\n" {
		t.Errorf("provider unpark of one not parked: got stdout %q", r.stdout)
	}
	if got := strings.Join(strings.Fields(mustRun(t, 0, "provider", "ls", "--db", db, "--json").stdout), ""); got != `{"providers":[]}` {
		t.Errorf("provider ls --json with none parked: got %s", got)
	}
	if got := mustRun(t, 0, "provider", "ls", "--db", db).stdout; got != "no parked providers\n" {
		t.Errorf("provider ls with none parked: got %q", got)
	}
}

// TestProviderParkTimes: --at and the default retry-after; a provider
// stops refusing at resume-at but stays listed.
func TestProviderParkTimes(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	for _, ra := range [][]string{nil, {"--retry-after", "0s"}} {
		args := append([]string{"provider", "park", "p", "--db", db, "--kind", "overloaded", "--at", "2026-03-02T09:00:00Z", "--json"}, ra...)
		if v := decode(t, mustRun(t, 0, args...).stdout); v["resume_at"] != "2026-03-02T09:01:00Z" {
			t.Errorf("provider park %v: got resume_at %v; want the default 60s later", ra, v["resume_at"])
		}
	}
	r := mustRun(t, 0, "provider", "park", "p", "--db", db, "--kind", "auth_missing", "--retry-after", "30m", "--at", "2026-03-02T09:00:00Z")
	if r.stdout != "p parked (auth_missing) until 2026-03-02T09:30:00Z\n" {
		t.Errorf("provider park: got stdout %q", r.stdout)
	}
	mustRun(t, 3, "check", "--db", db, "--key", "k", "--provider", "p", "--at", "2026-03-02T09:29:59Z")
	mustRun(t, 0, "check", "--db", db, "--key", "k", "--provider", "p", "--at", "2026-03-02T09:30:00Z")

	// Still listed after resume-at (testNow is 12:00), no longer refusing.
	v := decode(t, mustRun(t, 0, "provider", "ls", "--db", db, "--json").stdout)
	wantKeys(t, "provider ls --json", v, "providers")
	ps := v["providers"].([]any)
	if len(ps) != 1 {
		t.Fatalf("provider ls --json: got %v; want one provider", v)
	}
	wantKeys(t, "provider ls --json provider", ps[0], providerFields...)
	if p := ps[0].(map[string]any); p["kind"] != "auth_missing" || p["parked_at"] != "2026-03-02T09:00:00Z" || p["resume_at"] != "2026-03-02T09:30:00Z" {
		t.Errorf("provider ls --json: got %v", p)
	}
	txt := mustRun(t, 0, "provider", "ls", "--db", db).stdout
	for _, s := range []string{"PROVIDER", "REFUSING", "auth_missing", "2026-03-02T09:30:00Z", " no\n"} {
		if !strings.Contains(txt, s) {
			t.Errorf("provider ls text lacks %q:\n%s", s, txt)
		}
	}
	// inspect lists the same provider objects.
	ins := decode(t, mustRun(t, 0, "inspect", "--db", db, "--json").stdout)
	if !reflect.DeepEqual(ins["providers"], v["providers"]) {
		t.Errorf("inspect --json providers: got %v; want provider ls's %v", ins["providers"], v["providers"])
	}
}

// TestProviderReparkKeepsProbeFailures: a re-park refreshes the times and
// keeps the count of failed probes.
func TestProviderReparkKeepsProbeFailures(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "provider", "park", "p", "--db", db, "--kind", "rate_limited")
	ctx := context.Background()
	cfg := budget.DefaultConfig()
	cfg.SweepInterval = -1
	cfg.Now = func() time.Time { return testNow }
	lib, err := tokenbudget.Open(ctx, db, tokenbudget.Options{Config: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lib.ProbeFailed(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if err := lib.Close(ctx); err != nil {
		t.Fatal(err)
	}
	v := decode(t, mustRun(t, 0, "provider", "park", "p", "--db", db, "--kind", "overloaded", "--retry-after", "5m", "--json").stdout)
	if v["probe_failures"] != 1.0 || v["kind"] != "overloaded" || v["resume_at"] != ts(testNow.Add(5*time.Minute)) {
		t.Errorf("re-park after a failed probe: got %v; want probe_failures 1 kept, kind and times refreshed", v)
	}
	mustRun(t, 0, "provider", "unpark", "p", "--db", db)
	v = decode(t, mustRun(t, 0, "provider", "park", "p", "--db", db, "--kind", "overloaded", "--json").stdout)
	if v["probe_failures"] != 0.0 {
		t.Errorf("park after unpark: got probe_failures %v; want 0", v["probe_failures"])
	}
}

func TestProviderBadInput(t *testing.T) {
	t.Parallel()
	existing := tempDB(t)
	mustRun(t, 0, "provider", "park", "p", "--db", existing, "--kind", "overloaded", "--at", "2026-03-02T09:00:00Z")
	before := mustRun(t, 0, "provider", "ls", "--db", existing, "--json").stdout
	for _, tc := range []struct {
		args         []string
		field, value string
	}{
		{[]string{"park", "p"}, "kind", `""`},
		{[]string{"park", "p", "--kind", "on_fire"}, "kind", "on_fire"},
		{[]string{"park", "p", "--kind", "overloaded", "--retry-after", "-1s"}, "retry_after", "-1s"},
		{[]string{"park", "p", "--kind", "overloaded", "--retry-after", "soon"}, "retry-after", "soon"},
		{[]string{"park", " ", "--kind", "overloaded"}, "provider", `" "`},
		{[]string{"park", "", "--kind", "overloaded"}, "provider", `""`},
		{[]string{"park", "p", "--kind", "overloaded", "--at", "noon"}, "at", "noon"},
		{[]string{"park", "p", "q", "--kind", "overloaded"}, "provider", "2"},
		{[]string{"unpark", " "}, "provider", `" "`},
	} {
		fresh := tempDB(t)
		r := run(t, append([]string{"provider", tc.args[0], "--db", fresh}, tc.args[1:]...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.field) || !strings.Contains(r.stderr, tc.value) {
			t.Errorf("provider %q: got %v; want exit 2 naming %s and %s", tc.args, r, tc.field, tc.value)
		}
		if exists(fresh) {
			t.Errorf("provider %q created the database", tc.args)
		}
		mustRun(t, 2, append([]string{"provider", tc.args[0], "--db", existing}, tc.args[1:]...)...)
	}
	if after := mustRun(t, 0, "provider", "ls", "--db", existing, "--json").stdout; after != before {
		t.Errorf("bad input changed the providers:\nbefore %s\nafter %s", before, after)
	}
}
