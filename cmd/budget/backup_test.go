package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// What a killed backup or copy leaves, an empty file, and a SQLite file of
// another application are refused by every read-only command (exit 1,
// naming the file), which write nothing to them: no schema appears.
func TestReadOnlyCommandsRefuseAnEmptyOrForeignFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(dir, "foreign.db")
	sdb, err := sql.Open("sqlite", "file:"+foreign)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sdb.Exec("CREATE TABLE notes (body TEXT)"); err != nil {
		t.Fatal(err)
	}
	sdb.Close()
	foreignBefore, err := os.ReadFile(foreign)
	if err != nil {
		t.Fatal(err)
	}
	cmds := [][]string{
		{"verify"}, {"verify", "--integrity"}, {"verify", "--json"}, {"inspect"}, {"inspect", "--json"},
		{"report"}, {"check", "--key", "k", "--provider", "p", "--model", "m"}, {"export"},
		{"limit", "ls"}, {"key", "ls"}, {"team", "ls"}, {"alerts", "ls"}, {"provider", "ls"},
	}
	for _, file := range []string{empty, foreign} {
		for _, args := range cmds {
			r := run(t, append(args, "--db", file)...)
			if r.code != 1 || !strings.Contains(r.stderr, file) || !strings.Contains(r.stderr, "not a tokenbudget database") || r.stdout != "" {
				t.Errorf("budget %q on %s: got %v; want exit 1 naming the file, nothing on stdout", args, filepath.Base(file), r)
			}
		}
	}
	if fi, err := os.Stat(empty); err != nil || fi.Size() != 0 {
		t.Errorf("the empty file after the read-only commands: %v, %v; want it still empty (no schema written)", fi, err)
	}
	if after, err := os.ReadFile(foreign); err != nil || !bytes.Equal(after, foreignBefore) {
		t.Errorf("the foreign file after the read-only commands: changed (%v)", err)
	}
	// A command that adds state may still make the empty file a database.
	mustRun(t, 0, "limit", "set", "--db", empty, "--key", "k", "--limit", "5", "--window", "1h")
	mustRun(t, 0, "verify", "--db", empty)
}

// A backup killed mid-copy leaves only its temporary file beside the
// target (simulated here: a partial temporary file and its journal, as
// SQLite leaves them), never a file at the target; the next backup to the
// same name completes and verifies clean.
func TestBackupAfterAKilledOne(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustRun(t, 0, "limit", "set", "--db", db, "--key", "demo", "--limit", "1000", "--window", "1h", "--id", "h")
	mustRun(t, 0, "record", "--db", db, "--key", "demo", "--provider", "p", "--model", "m", "--input", "7", "--at", testNow.Format(time.RFC3339))
	dir := t.TempDir()
	out := filepath.Join(dir, "backup.db")
	stale := filepath.Join(dir, ".backup.db.123.tmp")
	for _, f := range []string{stale, stale + "-journal"} {
		if err := os.WriteFile(f, []byte("SQLite format 3\x00partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mustRun(t, 0, "backup", "--db", db, out)
	if r := mustRun(t, 0, "verify", "--db", out, "--integrity"); !strings.HasPrefix(r.stdout, "ok") {
		t.Errorf("verify on the backup: got %v", r)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	// Only the killed run's leftovers and the copy: this run's temporary
	// file is gone.
	if want := []string{".backup.db.123.tmp", ".backup.db.123.tmp-journal", "backup.db"}; !slices.Equal(names, want) {
		t.Errorf("files beside the backup: %q; want %q", names, want)
	}
}

// A backup that runs out of room (a file-size limit, which a process can
// set on itself unprivileged, makes SQLite's writes fail as on a full disk)
// exits 1 naming the target and leaves nothing beside it.
func TestBackupOutOfRoom(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("needs bash for ulimit -f")
	}
	bin := buildBudget(t)
	db := tempDB(t)
	var lines strings.Builder
	for i := range 400 {
		fmt.Fprintf(&lines, `{"request_id":"r%d","key":"k%d","provider":"p","model":"model-%d-%s","input":1,"output":1,"at":"2026-03-02T10:00:00Z"}`+"\n",
			i, i, i, strings.Repeat("x", 60))
	}
	runStdin(t, lines.String(), "import", "--db", db, "-")
	if fi, err := os.Stat(db); err != nil || fi.Size() < 200<<10 {
		t.Fatalf("the database: %v, %v; want more than the 128 KiB the backup may write", fi, err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "backup.db")
	var stderr bytes.Buffer
	cmd := exec.Command(bash, "-c", `ulimit -f 128 && exec "$0" "$@"`, bin, "backup", "--db", db, out)
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), out) {
		t.Errorf("backup out of room: got %v, stderr %q; want exit 1 naming %s", err, stderr.String(), out)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Errorf("files left beside the target: %v (%v); want none", ents, err)
	}
}
