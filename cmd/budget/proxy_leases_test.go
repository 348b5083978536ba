package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/proxy"
)

// TestProxyLeases: reserve mode takes leases by default: while it runs,
// another process's inspect counts the room its lease holds as reserved,
// and its journal directory is beside the database; it charges every
// request exactly (its actual usage), holds nothing once it stopped, and
// leaves no journal behind: its leases were given back and their journals
// removed. With --leases=false every request goes through the store:
// nothing stays reserved between requests and no journal directory is made.
func TestProxyLeases(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		args   []string
		leases bool
	}{{"default", nil, true}, {"--leases=false", []string{"--leases=false"}, false}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := tempDB(t)
			secret := strings.TrimSpace(mustRun(t, 0, "key", "add", "app", "--db", db).stdout)
			mustRun(t, 0, "limit", "set", "--db", db, "--key", "app", "--limit", "1000000", "--window", "daily")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			line, done := startCLI(t, ctx, nil, append([]string{"proxy", "--db", db, "--mock-upstream", "--listen", "127.0.0.1:0"}, c.args...)...)
			base := listenURL(t, line)
			const n = 20
			for range n {
				if code, body := post(t, base+"/v1/messages", secret, `{"model":"claude","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`); code != 200 {
					t.Fatalf("POST /v1/messages: %d %s", code, body)
				}
			}
			// The lease's hold is written by the proxy's writer; its clock
			// stands still (testNow), so the lease never idles meanwhile.
			waitFor(t, 10*time.Second, "inspect shows what the proxy holds", func() (bool, string) {
				l := decode(t, mustRun(t, 0, "inspect", "--db", db, "--json").stdout)["limits"].([]any)[0].(map[string]any)
				return c.leases == (l["reserved"].(float64) > 0) && l["used"] == float64(n*15), fmt.Sprint(l)
			})
			if _, err := os.Stat(db + ".leases"); c.leases != (err == nil) {
				t.Fatalf("the lease journal directory: %v; want it only with leases", err)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("proxy exited with %v", err)
			}
			// mock: input ceil((4+2)/4)+3 = 5, output 10 (cut at max_tokens)
			v := decode(t, mustRun(t, 0, "inspect", "--db", db, "--json").stdout)
			if l := v["limits"].([]any)[0].(map[string]any); l["used"] != float64(n*15) || l["reserved"] != 0.0 {
				t.Errorf("after %d requests and shutdown: used %v, reserved %v; want %d, 0", n, l["used"], l["reserved"], n*15)
			}
			if entries, err := os.ReadDir(db + ".leases"); c.leases && (err != nil || len(entries) != 0) {
				t.Errorf("journals left after shutdown: %d (%v)", len(entries), err)
			}
			mustRun(t, 0, "verify", "--db", db)
		})
	}
}

// TestProxyLeaseJournalDefaults: where budget proxy journals its leases
// when --lease-journal is not given, and when it keeps the store path
// instead, saying why on stderr.
func TestProxyLeaseJournalDefaults(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	pg := "postgres://tb:secret@db.internal:5432/budget?sslmode=require"
	for _, c := range []struct {
		name, dsn, journal string
		env                map[string]string
		mode               proxy.Mode
		off                bool
		wantDir, wantWhy   string // wantWhy: in the stderr line; "": no line
		wantLeases         bool
	}{
		{name: "sqlite", dsn: "/data/budget.db", wantDir: "/data/budget.db.leases", wantLeases: true},
		{name: "sqlite, --leases=false", dsn: "/data/budget.db", off: true, wantDir: "/data/budget.db.leases"},
		{name: "sqlite, check mode", dsn: "/data/budget.db", mode: proxy.ModeCheck, wantDir: "/data/budget.db.leases"},
		{name: "explicit journal", dsn: "/data/budget.db", journal: "/j", wantDir: "/j", wantLeases: true},
		{name: "memory", dsn: ":memory:", wantWhy: "has no file path"},
		{name: "sqlite URI", dsn: "file:budget.db?cache=shared", wantWhy: "has no file path"},
		{name: "postgres, XDG_STATE_HOME", dsn: pg, env: map[string]string{"XDG_STATE_HOME": state, "HOME": "/nonexistent"},
			wantDir: filepath.Join(state, "tokenbudget", "leases", postgresIdentity(pg)), wantLeases: true},
		{name: "postgres, HOME", dsn: pg, env: map[string]string{"HOME": state},
			wantDir: filepath.Join(state, ".local", "state", "tokenbudget", "leases", postgresIdentity(pg)), wantLeases: true},
		{name: "postgres, no home", dsn: pg, wantWhy: "no $XDG_STATE_HOME or $HOME"},
		{name: "postgres, unmakeable", dsn: pg, env: map[string]string{"XDG_STATE_HOME": "/dev/null/state"},
			wantDir: filepath.Join("/dev/null/state", "tokenbudget", "leases", postgresIdentity(pg)), wantWhy: "cannot be made"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stderr bytes.Buffer
			m := &Main{Getenv: func(k string) string { return c.env[k] }}
			o := proxyOptions{dsn: c.dsn, leaseJournal: c.journal, leases: !c.off, mode: cmp.Or(c.mode, proxy.ModeReserve),
				log: slog.New(slog.NewTextHandler(&stderr, nil))}
			cfg := budget.DefaultConfig()
			m.proxyLeases(o, &cfg)
			if cfg.Leases != c.wantLeases || cfg.LeaseJournal != c.wantDir {
				t.Errorf("leases %v, journal %q; want %v, %q", cfg.Leases, cfg.LeaseJournal, c.wantLeases, c.wantDir)
			}
			switch lines := strings.Count(stderr.String(), "\n"); {
			case c.wantWhy == "" && lines != 0:
				t.Errorf("stderr %q; want nothing", stderr.String())
			case c.wantWhy != "" && (lines != 1 || !strings.Contains(stderr.String(), "leases off") || !strings.Contains(stderr.String(), c.wantWhy)):
				t.Errorf("stderr %q; want one line saying leases are off because %q", stderr.String(), c.wantWhy)
			}
			if strings.Contains(stderr.String(), "secret") {
				t.Errorf("stderr shows the password: %q", stderr.String())
			}
		})
	}
}

// TestPostgresIdentity: replicas whose DSNs name one database share one
// journal directory whatever their password or connection options; two
// databases (host, port, database, user or schema apart) never do.
func TestPostgresIdentity(t *testing.T) {
	t.Parallel()
	base := postgresIdentity("postgres://tb:secret@db.internal:5432/budget?sslmode=require")
	for _, same := range []string{
		"postgres://tb:other@db.internal:5432/budget?sslmode=require",
		"postgresql://tb:secret@db.internal/budget?sslmode=disable&connect_timeout=5",
	} {
		if got := postgresIdentity(same); got != base {
			t.Errorf("%s: %s; want %s, the same database's", same, got, base)
		}
	}
	for _, other := range []string{
		"postgres://tb:secret@db2.internal:5432/budget",
		"postgres://tb:secret@db.internal:5433/budget",
		"postgres://tb:secret@db.internal:5432/budget2",
		"postgres://ops:secret@db.internal:5432/budget",
		"postgres://tb:secret@db.internal:5432/budget?search_path=tenant2",
	} {
		if got := postgresIdentity(other); got == base {
			t.Errorf("%s: %s, the same as another database's", other, got)
		}
	}
	if len(base) != 24 || strings.Trim(base, "0123456789abcdef") != "" {
		t.Errorf("identity %q; want 24 hex digits", base)
	}
}

// TestProxyInMemoryMakesNoFile: budget proxy --db :memory: keeps its
// database in memory and leaves no file named ":memory:" in its working
// directory.
func TestProxyInMemoryMakesNoFile(t *testing.T) {
	t.Parallel()
	bin := buildBudget(t)
	dir := t.TempDir()
	p := startProxyProcIn(t, bin, dir, nil, "--db", ":memory:", "--mock-upstream")
	if code, body := getURL(proxyClient(), p.url+"/healthz"); code != http.StatusOK {
		t.Fatalf("GET /healthz of a proxy on :memory:: %d %s; want 200", code, body)
	}
	p.kill(t)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("budget proxy --db :memory: left %q in its working directory; want nothing", e.Name())
	}
}
