package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	tokenbudget "github.com/tokenbudget/tokenbudget"
	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/store/sqlite"
)

// recordN writes n events of key k synchronously: each is committed when
// it returns.
func recordN(t testing.TB, tr *budget.Tracker, k string, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		u := budget.Usage{RequestID: fmt.Sprintf("%s-%d", k, i), Key: k, Provider: "p", Model: "m", Input: 10, Output: 5, At: fixed()}
		if _, err := tr.RecordSync(context.Background(), u); err != nil {
			t.Fatal(err)
		}
	}
}

// usageRows counts the events in the database file at path, read with a
// plain connection (no WAL beside a fresh backup).
func usageRows(t testing.TB, path string) int {
	t.Helper()
	sdb, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	var n int
	if err := sdb.QueryRow("SELECT count(*) FROM usage").Scan(&n); err != nil {
		t.Fatalf("count usage rows in %s: %v", path, err)
	}
	return n
}

// checkCopy opens the backup at path as a database and fails the test
// unless verify (with the integrity check) finds it clean.
func checkCopy(t *testing.T, path string) {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path, tokenbudget.SQLiteSchema, sqlite.Options{})
	if err != nil {
		t.Fatalf("open the backup: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	tr := newTracker(t, s, func(c *budget.Config) { c.Now = fixed })
	rep, err := tr.CheckStorage(ctx, true)
	if err != nil || len(rep.Problems) > 0 {
		t.Fatalf("CheckStorage(backup) = %v, %v; want no problems", rep.Problems, err)
	}
	drift, err := tr.Verify(ctx)
	if err != nil || len(drift) > 0 {
		t.Fatalf("Verify(backup) = %v, %v; want no drift", drift, err)
	}
}

// A backup taken while the tracker's writer connection is open and its
// commits are still in the write-ahead log (a copy of the main file alone
// would hold none of them) holds every committed event and verifies clean.
func TestBackupHoldsCommitsStillInTheWAL(t *testing.T) {
	ctx := context.Background()
	path := tmpDB(t)
	s := openStore(t, path)
	tr := newTracker(t, s, func(c *budget.Config) { c.Now = fixed })
	max := int64(1_000_000)
	if _, _, err := tr.SetLimit(ctx, budget.LimitSpec{ID: "h", Key: "k", Window: "1h", Max: &max}); err != nil {
		t.Fatal(err)
	}
	recordN(t, tr, "k", 0, 51)
	if fi, err := os.Stat(path + "-wal"); err != nil || fi.Size() == 0 {
		t.Fatalf("the WAL before the backup: %v, %v; want the commits still in it", fi, err)
	}

	out := filepath.Join(t.TempDir(), "copy.db")
	if err := s.Backup(ctx, out); err != nil {
		t.Fatalf("Backup: %v", err)
	}
	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("backup mode: got %v; want 0600", got)
	}
	for _, side := range []string{"-wal", "-shm", "-journal"} {
		if _, err := os.Stat(out + side); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("backup left %s beside it (%v); want one self-contained file", out+side, err)
		}
	}
	if got := usageRows(t, out); got != 51 {
		t.Errorf("usage rows in the backup: got %d; want 51", got)
	}
	checkCopy(t, out)
}

// Writes running during a backup neither block it nor tear it: the copy
// holds at least everything committed before it began and verifies clean.
func TestBackupWhileWriting(t *testing.T) {
	ctx := context.Background()
	path := tmpDB(t)
	s := openStore(t, path)
	tr := newTracker(t, s, func(c *budget.Config) { c.Now = fixed })
	max := int64(1_000_000_000)
	if _, _, err := tr.SetLimit(ctx, budget.LimitSpec{ID: "h", Key: "k", Window: "1h", Max: &max}); err != nil {
		t.Fatal(err)
	}
	recordN(t, tr, "k", 0, 200)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 200; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			u := budget.Usage{RequestID: fmt.Sprintf("k-%d", i), Key: "k", Provider: "p", Model: "m", Input: 1, At: fixed()}
			if _, err := tr.RecordSync(ctx, u); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	out := filepath.Join(t.TempDir(), "copy.db")
	err := s.Backup(ctx, out)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("Backup while writing: %v", err)
	}
	if got := usageRows(t, out); got < 200 {
		t.Errorf("usage rows in the backup: got %d; want at least the 200 committed before it began", got)
	}
	checkCopy(t, out)
}

// An existing destination, even an empty file (which VACUUM INTO itself
// would fill), is invalid input and is left as it was.
func TestBackupRefusesAnExistingFile(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, tmpDB(t))
	newTracker(t, s, nil)
	dir := t.TempDir()
	for _, content := range []string{"keep me\n", ""} {
		out := filepath.Join(dir, fmt.Sprintf("existing-%d.db", len(content)))
		if err := os.WriteFile(out, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		err := s.Backup(ctx, out)
		if !errors.Is(err, budget.ErrInvalid) || !strings.Contains(err.Error(), out) {
			t.Errorf("Backup onto an existing file: got %v; want ErrInvalid naming %s", err, out)
		}
		got, rerr := os.ReadFile(out)
		fi, serr := os.Stat(out)
		if rerr != nil || serr != nil || string(got) != content || fi.Mode().Perm() != 0o644 {
			t.Errorf("existing file after a refused backup: %q (%v, %v); want %q untouched", got, rerr, serr, content)
		}
	}
}

// A destination that cannot be created fails naming it and leaves nothing.
func TestBackupIntoAMissingDirectory(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, tmpDB(t))
	newTracker(t, s, nil)
	out := filepath.Join(t.TempDir(), "no-such-dir", "copy.db")
	err := s.Backup(ctx, out)
	if err == nil || errors.Is(err, budget.ErrInvalid) || !strings.Contains(err.Error(), out) {
		t.Errorf("Backup into a missing directory: got %v; want an I/O error naming %s", err, out)
	}
}
