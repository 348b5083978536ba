package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
)

// A backup taken while another tracker (a proxy, say) has its writer open
// and its commits still in the write-ahead log holds every event, and
// verify passes on it.
func TestBackupWhileATrackerWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "demo", "--limit", "1000000", "--window", "1h", "--id", "h")
	cfg := budget.DefaultConfig()
	cfg.SweepInterval = -1
	cfg.Now = func() time.Time { return testNow }
	live, err := tokenbudget.Open(ctx, db, tokenbudget.Options{Config: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { live.Close(context.Background()) })
	for i := range 51 {
		u := budget.Usage{RequestID: fmt.Sprintf("r%d", i), Key: "demo", Provider: "openai", Model: "gpt-4o", Input: 100, Output: 20, At: testNow}
		if _, err := live.RecordSync(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	if fi, err := os.Stat(db + "-wal"); err != nil || fi.Size() == 0 {
		t.Fatalf("the WAL before the backup: %v, %v; want the commits still in it", fi, err)
	}

	out := filepath.Join(t.TempDir(), "backup.db")
	r := mustRun(t, 0, "backup", "--db", db, out)
	if r.stdout != db+" backed up to "+out+"\n" || r.stderr != "" {
		t.Errorf("backup output: got %v; want the confirmation on stdout only", r)
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("backup file: %v, %v; want mode 0600", fi, err)
	}
	sdb, err := sql.Open("sqlite", "file:"+out+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	var n int
	err = sdb.QueryRow("SELECT count(*) FROM usage").Scan(&n)
	sdb.Close()
	if err != nil || n != 51 {
		t.Errorf("usage rows in the backup: got %d (%v); want 51", n, err)
	}
	if r := mustRun(t, 0, "verify", "--db", out, "--integrity"); !strings.HasPrefix(r.stdout, "ok") {
		t.Errorf("verify on the backup: got %v", r)
	}
	r = mustRun(t, 0, "inspect", "--db", out, "--json")
	if l := decode(t, r.stdout)["limits"].([]any); len(l) != 1 || l[0].(map[string]any)["used"] != 51*120.0 {
		t.Errorf("inspect on the backup: got %s; want limit h with 6120 used", r.stdout)
	}
}

// An existing destination is bad input (exit 2), checked before the
// database is opened, and is left as it was.
func TestBackupRefusesAnExistingFile(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "demo", "--limit", "10", "--window", "1h")
	out := filepath.Join(t.TempDir(), "backup.db")
	if err := os.WriteFile(out, []byte("an older backup\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dbPath := range []string{db, filepath.Join(t.TempDir(), "missing.db")} {
		r := mustRun(t, 2, "backup", "--db", dbPath, out)
		if !strings.Contains(r.stderr, out) || !strings.Contains(r.stderr, "already exists") || r.stdout != "" {
			t.Errorf("backup onto an existing file: got %v; want exit 2 naming %s", r, out)
		}
		if got, err := os.ReadFile(out); err != nil || string(got) != "an older backup\n" {
			t.Errorf("existing file after a refused backup: %q, %v; want it untouched", got, err)
		}
	}
}

func TestBackupUsage(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "demo", "--limit", "10", "--window", "1h")
	out := filepath.Join(t.TempDir(), "backup.db")
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr []string // each must appear
	}{
		{"no FILE", []string{"backup", "--db", db}, 2, []string{"missing FILE"}},
		{"two files", []string{"backup", "--db", db, out, out + "2"}, 2, []string{"unexpected argument"}},
		{"PostgreSQL", []string{"backup", "--db", "postgres://tb:s3cret@db.invalid:5432/budget", out}, 2, []string{"pg_dump", "postgres://tb:xxxxx@db.invalid:5432/budget"}},
		{"postgresql scheme", []string{"backup", "--db", "postgresql://db.invalid/budget", out}, 2, []string{"pg_dump"}},
		{"missing database", []string{"backup", "--db", filepath.Join(t.TempDir(), "nope.db"), out}, 1, []string{"nope.db"}},
	} {
		r := run(t, tc.args...)
		if r.code != tc.code || r.stdout != "" || strings.Contains(r.stderr, "s3cret") {
			t.Errorf("%s: got %v; want exit %d, nothing on stdout, no password", tc.name, r, tc.code)
		}
		for _, s := range tc.stderr {
			if !strings.Contains(r.stderr, s) {
				t.Errorf("%s: stderr %q; want it to mention %q", tc.name, r.stderr, s)
			}
		}
		if exists(out) {
			t.Fatalf("%s: a refused backup created %s", tc.name, out)
		}
	}
	if r := mustRun(t, 0, "backup", "-h"); !strings.Contains(r.stdout, "budget backup [--db PATH] FILE") {
		t.Errorf("backup -h: got %v", r)
	}
}
