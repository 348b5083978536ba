package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// readOnly are commands that never create a database.
var readOnly = [][]string{
	{"limit", "ls"},
	{"limit", "rm", "lim_x"},
	{"limit", "raise", "lim_x", "--by", "1"},
	{"team", "ls"},
	{"team", "rm", "t"},
	{"inspect", "--team", "t"},
	{"check", "--key", "k"},
	{"inspect"},
	{"verify"},
	{"commit", "rsv_x"},
	{"release", "rsv_x"},
	{"recover"},
	{"provider", "unpark", "p"},
	{"provider", "ls"},
}

// creating are commands that add state: they create a missing database.
var creating = [][]string{
	{"limit", "set", "--key", "k", "--limit", "5", "--window", "1h"},
	{"record", "--key", "k", "--provider", "p", "--model", "m", "--input", "1"},
	{"reserve", "--key", "k", "--tokens", "1"},
	{"provider", "park", "p", "--kind", "overloaded"},
	{"team", "set", "t", "--org", "o"},
	{"key", "set-team", "k", "--none"},
}

func TestReadOnlyCommandsOnMissingDB(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	for _, args := range readOnly {
		r := run(t, append(args, "--db", db)...)
		if r.code != 1 || !strings.Contains(r.stderr, db) {
			t.Errorf("budget %s on a missing db: got %v; want exit 1 naming %s", strings.Join(args, " "), r, db)
		}
		if exists(db) {
			t.Fatalf("budget %s created %s", strings.Join(args, " "), db)
		}
	}
}

// TestNotSQLite: a file that is not a database is refused by every command,
// with exit 1 and a clear message, and left untouched.
func TestNotSQLite(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "notes.txt")
	content := []byte("these are my notes, not a database\n")
	if err := os.WriteFile(db, content, 0o644); err != nil {
		t.Fatal(err)
	}
	events := filepath.Join(t.TempDir(), "u.jsonl")
	os.WriteFile(events, []byte(`{"key":"k","provider":"p","model":"m","input":1}`+"\n"), 0o644)
	all := slices.Concat(creating, [][]string{{"import", events}}, readOnly)
	for _, args := range all {
		r := run(t, append(args, "--db", db)...)
		if r.code != 1 || !strings.Contains(r.stderr, "not a SQLite database") || !strings.Contains(r.stderr, db) {
			t.Errorf("budget %s on a text file: got %v; want exit 1, not a SQLite database", strings.Join(args, " "), r)
		}
		got, err := os.ReadFile(db)
		if err != nil || !bytes.Equal(got, content) {
			t.Fatalf("budget %s changed the file: %q, %v", strings.Join(args, " "), got, err)
		}
	}
	if m, _ := filepath.Glob(db + "-*"); len(m) > 0 {
		t.Errorf("SQLite side files created next to a text file: %v", m)
	}
}

func TestDirectoryAsDB(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := run(t, "inspect", "--db", dir)
	if r.code != 1 || !strings.Contains(r.stderr, dir) {
		t.Errorf("inspect on a directory: got %v; want exit 1 naming it", r)
	}
}

func TestNewDBIsPrivate(t *testing.T) {
	t.Parallel()
	for _, args := range creating {
		db := tempDB(t)
		mustRun(t, 0, append(args, "--db", db)...)
		st, err := os.Stat(db)
		if err != nil {
			t.Fatalf("budget %s did not create the database: %v", strings.Join(args, " "), err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("budget %s: mode of the new database: got %v; want 0600", strings.Join(args, " "), st.Mode().Perm())
		}
	}
}

// TestPostgresDSN: PostgreSQL is not built yet; the error never shows the password.
func TestPostgresDSN(t *testing.T) {
	t.Parallel()
	dsn := "postgres://budget:hunter2@db.example:5432/budget"
	for _, args := range [][]string{{"inspect"}, {"limit", "set", "--key", "k", "--limit", "1", "--window", "1h"}} {
		r := run(t, append(args, "--db", dsn)...)
		if r.code != 1 || strings.Contains(r.stderr+r.stdout, "hunter2") || !strings.Contains(r.stderr, "db.example") {
			t.Errorf("budget %s --db postgres://...: got %v; want exit 1 naming the host without the password", strings.Join(args, " "), r)
		}
	}
}

func TestEmptyDBPath(t *testing.T) {
	t.Parallel()
	r := run(t, "inspect", "--db", "")
	if r.code != 2 || !strings.Contains(r.stderr, "db") {
		t.Errorf("inspect --db '': got %v; want exit 2", r)
	}
}
